package termsafe

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// hostile holds every class Unsafe names, as a file name, ref or message could.
const hostile = "a\x1b[2J\x1b]0;title\x07b\rc\x08d\u009b31m\xc2\x9de\u202eevil\u2066f\u2069\u200fg\u2028h\xff\xfei\x7f"

// terminalCommand reports whether b holds any byte or rune a terminal could act on.
func terminalCommand(b []byte) bool {
	s := string(b)
	for _, r := range s {
		if r != '\n' && r != '\t' && Unsafe(r) {
			return true
		}
	}
	return !bytes.Equal(bytes.ToValidUTF8(b, nil), b)
}

func TestString(t *testing.T) {
	got := String(hostile + "\n\t")
	if terminalCommand([]byte(got)) || strings.ContainsAny(got, "\n\t") {
		t.Fatalf("String left a control in %q", got)
	}
	for _, want := range []string{`\x1b[2J`, `\x07`, `\r`, `\x08`, `\u009b`, `\u009d`, `\u202e`, `\u2066`, `\u200f`, `\u2028`, `\xff\xfe`, `\x7f`, `\n\t`} {
		if !strings.Contains(got, want) {
			t.Errorf("String(%q) = %q, lacks %s", hostile, got, want)
		}
	}
	for _, ok := range []string{"", "plain/path with spaces", "héllo wörld ✓ 日本"} {
		if String(ok) != ok {
			t.Errorf("String(%q) = %q, want it unchanged", ok, String(ok))
		}
	}
}

func TestQuote(t *testing.T) {
	if q := Quote(hostile); terminalCommand([]byte(q)) || !strings.HasPrefix(q, `"`) {
		t.Errorf("Quote(hostile) = %q", q)
	}
	if Quote("/home/u/repo") != "/home/u/repo" || Quote("a b") != `"a b"` {
		t.Errorf("Quote of plain paths: %q %q", Quote("/home/u/repo"), Quote("a b"))
	}
}

// TestWriter: every split of the hostile text into two Writes gives the same safe
// bytes, with newlines kept.
func TestWriter(t *testing.T) {
	in := []byte(hostile + "\nline two\t✓\n")
	var want bytes.Buffer
	w := NewWriter(&want)
	w.Write(in)
	w.Flush()
	if terminalCommand(want.Bytes()) || strings.Count(want.String(), "\n") != 2 {
		t.Fatalf("Writer output %q", want.String())
	}
	for i := range in {
		var out bytes.Buffer
		w := NewWriter(&out)
		w.Write(in[:i])
		w.Write(in[i:])
		w.Flush()
		if out.String() != want.String() {
			t.Fatalf("split at %d: %q, want %q", i, out.String(), want.String())
		}
	}
}

// TestJSONWriter: a document with every class Unsafe names in its strings reaches the
// terminal without one, decodes to the same values, and does so however the writes
// split it.
func TestJSONWriter(t *testing.T) {
	type doc struct {
		Path  string            `json:"path"`
		Notes []string          `json:"notes"`
		Keys  map[string]string `json:"keys"`
	}
	// encoding/json makes each invalid byte U+FFFD: the value read back has that.
	valid := strings.ReplaceAll(strings.ReplaceAll(hostile, "\xff", "\uFFFD"), "\xfe", "\uFFFD")
	d := doc{Path: hostile, Notes: []string{"\u061c" + hostile, "plain"}, Keys: map[string]string{hostile: "\u0085"}}
	in, err := json.MarshalIndent(d, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	in = append(in, '\n')
	if !terminalCommand(in) {
		t.Fatal("encoding/json escapes every class now: the test no longer shows what JSONWriter adds")
	}
	var want bytes.Buffer
	w := NewJSONWriter(&want)
	w.Write(in)
	w.Flush()
	if terminalCommand(want.Bytes()) {
		t.Fatalf("JSONWriter output %q", want.String())
	}
	var got doc
	if err := json.Unmarshal(want.Bytes(), &got); err != nil {
		t.Fatalf("JSONWriter output is not JSON: %v\n%s", err, want.String())
	}
	if got.Path != valid || got.Notes[0] != "\u061c"+valid || got.Notes[1] != "plain" || got.Keys[valid] != "\u0085" {
		t.Fatalf("decoded %+q, want the values written", got)
	}
	for i := range in {
		var out bytes.Buffer
		w := NewJSONWriter(&out)
		w.Write(in[:i])
		w.Write(in[i:])
		w.Flush()
		if out.String() != want.String() {
			t.Fatalf("split at %d: %q, want %q", i, out.String(), want.String())
		}
	}
	// Bytes no encoder writes (a document read from elsewhere) still reach no
	// terminal: an invalid byte becomes what a JSON reader takes it for.
	var raw bytes.Buffer
	w = NewJSONWriter(&raw)
	w.Write([]byte("\"a\xffb\x7f\"\n"))
	w.Flush()
	if raw.String() != "\"a\\ufffdb\\u007f\"\n" {
		t.Fatalf("raw bytes: %q", raw.String())
	}
}
