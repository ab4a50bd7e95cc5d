package fixedjson

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// reference is json.Marshal's compact output with HTML escaping off.
func reference(t testing.TB, v any) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte{'\n'})
}

var stringSeeds = []string{
	"", "plain", `"quoted"`, `back\slash`, "\x00\x01\x1f\x7f", "\b\f\n\r\t", "<a&b>",
	"é日本😀", "\u2028\u2029", "\xff", "a\xe2\x82b", "\xed\xa0\x80", "\ufffd", "\xf4\x90\x80\x80",
}

func TestAppendStringAsJSON(t *testing.T) {
	for _, s := range stringSeeds {
		if got, want := AppendString(nil, s), reference(t, s); !bytes.Equal(got, want) {
			t.Errorf("AppendString(%q) = %s, encoding/json %s", s, got, want)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range stringSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := AppendString([]byte("x"), s), append([]byte("x"), reference(t, s)...); !bytes.Equal(got, want) {
			t.Errorf("AppendString(%q) = %s, encoding/json %s", s, got, want)
		}
	})
}

func TestAppendStringsAndTimeAsJSON(t *testing.T) {
	for _, v := range [][]string{nil, {}, {"a"}, {"a", "\n", ""}} {
		if got, want := AppendStrings(nil, v), reference(t, v); !bytes.Equal(got, want) {
			t.Errorf("AppendStrings(%q) = %s, encoding/json %s", v, got, want)
		}
	}
	for _, v := range []time.Time{{}, time.Unix(1700000000, 123).UTC(), time.Unix(-5, 0).In(time.FixedZone("", -3600))} {
		got, err := AppendTime(nil, v)
		if want := reference(t, v); err != nil || !bytes.Equal(got, want) {
			t.Errorf("AppendTime(%v) = %s, %v; encoding/json %s", v, got, err, want)
		}
	}
	if _, err := AppendTime(nil, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)); err == nil {
		t.Error("AppendTime of the year 10000: no error")
	}
}

func TestKeyAndElemPlaceCommas(t *testing.T) {
	b := []byte("{")
	b = AppendBool(Key(b, "a"), true)
	b = append(Key(b, "b"), '[')
	b = append(Elem(b), "1"...)
	b = append(Elem(b), "2"...)
	b = append(b, ']')
	b = append(Key(b, "c"), '{', '}')
	b = AppendString(Key(b, "d"), "")
	b = append(b, '}')
	if want := `{"a":true,"b":[1,2],"c":{},"d":""}`; string(b) != want {
		t.Errorf("got %s, want %s", b, want)
	}
}

var indentSeeds = []string{
	`{}`, `[]`, `{"a":[]}`, `{"a":{},"b":[1,{"c":"x,y:{}[]"}],"d":"\"\\"}`, `"s"`, `12`, `[[],[[]],{"":""}]`,
	`{"s":"a\\","t":"\u2028"}`, `[true,false,null,-1.5e3]`,
}

func checkIndent(t *testing.T, compact []byte) {
	var want bytes.Buffer
	if json.Indent(&want, compact, "", "  ") != nil {
		return
	}
	if got := AppendIndent([]byte("x"), compact); !bytes.Equal(got[1:], want.Bytes()) {
		t.Errorf("AppendIndent(%s) =\n%s\njson.Indent:\n%s", compact, got[1:], want.Bytes())
	}
}

func TestAppendIndentAsJSON(t *testing.T) {
	for _, s := range indentSeeds {
		checkIndent(t, []byte(s))
	}
}

// FuzzAppendIndent feeds AppendIndent compact JSON (what json.Compact makes of the
// input, when it is JSON) and compares with json.Indent.
func FuzzAppendIndent(f *testing.F) {
	for _, s := range indentSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var compact bytes.Buffer
		if json.Compact(&compact, b) != nil {
			return
		}
		checkIndent(t, compact.Bytes())
	})
}
