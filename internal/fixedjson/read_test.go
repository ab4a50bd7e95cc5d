package fixedjson

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// sample is a type shaped like the records the Reader serves: strings, integers of
// several widths, a bool, a time, a string list, a nested object and a list of them.
type sample struct {
	S   string      `json:"s"`
	I   int         `json:"i"`
	I64 int64       `json:"i64"`
	U32 uint32      `json:"u32"`
	U16 uint16      `json:"u16"`
	B   bool        `json:"b"`
	T   time.Time   `json:"t"`
	L   []string    `json:"l"`
	N   sampleInner `json:"n"`
	E   []sampleInner
}

type sampleInner struct {
	X string `json:"x"`
	Y int64  `json:"y"`
}

func readSample(b []byte) (sample, bool) {
	var v sample
	r := NewReader(b)
	ok := r.Object(func(r *Reader, name []byte) int {
		switch string(name) {
		case "s":
			return Member(0, r.String(&v.S))
		case "i":
			return Member(1, r.Int(&v.I))
		case "i64":
			return Member(2, r.Int64(&v.I64))
		case "u32":
			return Member(3, r.Uint32(&v.U32))
		case "u16":
			return Member(4, r.Uint16(&v.U16))
		case "b":
			return Member(5, r.Bool(&v.B))
		case "t":
			return Member(6, r.Time(&v.T))
		case "l":
			return Member(7, r.Strings(&v.L))
		case "n":
			return Member(8, readInner(r, &v.N))
		case "E":
			v.E = []sampleInner{}
			return Member(9, r.Array(func(r *Reader) bool {
				var in sampleInner
				ok := readInner(r, &in)
				v.E = append(v.E, in)
				return ok
			}))
		}
		return -1
	})
	return v, ok && r.End()
}

func readInner(r *Reader, v *sampleInner) bool {
	return r.Object(func(r *Reader, name []byte) int {
		switch string(name) {
		case "x":
			return Member(0, r.String(&v.X))
		case "y":
			return Member(1, r.Int64(&v.Y))
		}
		return -1
	})
}

var readSeeds = []string{
	`{}`, ` { } `, `{"s":"a","i":-3,"i64":9223372036854775807,"u32":4294967295,"u16":65535,"b":true,"t":"2026-12-07T07:00:00.5+01:00","l":["x",""],"n":{"x":"é","y":0},"E":[{"x":"1"},{}]}`,
	`{"l":[]}`, `{"E":[]}`, `{"s":"a\nb"}`, `{"s":"\u0041"}`, `{"i":1.0}`, `{"i":1e2}`, `{"i":01}`, `{"i":-0}`,
	`{"u32":-0}`, `{"u32":4294967296}`, `{"u16":65536}`, `{"i64":9223372036854775808}`, `{"s":null}`,
	`{"l":null}`, `{"t":null}`, `{"t":"not a time"}`, `{"S":"case"}`, `{"s":"a","s":"b"}`,
	`{"n":{"x":"a"},"n":{"y":1}}`, `{"unknown":1}`, `{"b":truex}`, `{"b":tru}`, `{"s":"a"} x`, `{"s":"a"`,
	`{"s":"\xff"}`, `{"s":"a` + "\t" + `b"}`, `{"i":"1"}`, `{"s":1}`, `[]`, `null`, `{"l":["a",1]}`, `{"l":["a",]}`,
	`{,}`, `{"s":"a",}`, `{"E":[{"x":"a","x":"b"}]}`, "{\"b\":false\n}", `{"i":12,"i64":-9223372036854775808}`,
}

// TestReaderAcceptsOnlyWhatJSONReadsAlike: whatever the fast path accepts,
// encoding/json accepts into the same value; what it refuses falls back.
func TestReaderAcceptsOnlyWhatJSONReadsAlike(t *testing.T) {
	accepted := 0
	for _, s := range readSeeds {
		if checkAgainstJSON(t, []byte(s)) {
			accepted++
		}
	}
	// The seeds the fast path must take: the three objects, the empty lists, the
	// -0, the false before a newline and the two integers.
	if accepted != 8 {
		t.Errorf("the fast path accepted %d of the seeds, want 8", accepted)
	}
}

func FuzzReader(f *testing.F) {
	for _, s := range readSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkAgainstJSON(t, b) })
}

func checkAgainstJSON(t *testing.T, b []byte) bool {
	t.Helper()
	got, ok := readSample(b)
	if !ok {
		return false
	}
	var want sample
	if err := json.Unmarshal(b, &want); err != nil {
		t.Errorf("fast path accepted %q, encoding/json refuses it: %v", b, err)
		return true
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%q: fast path read %+v, encoding/json %+v", b, got, want)
	}
	return true
}

// TestUnmarshalFallsBackToJSON: what the fast path does not take is json.Unmarshal's,
// its value and its error alike, and a refused fast read leaves nothing behind.
func TestUnmarshalFallsBackToJSON(t *testing.T) {
	read := func(r *Reader, v *sample) bool {
		got, ok := readSample(r.b)
		r.i = len(r.b)
		*v = got
		return ok
	}
	for _, s := range []string{`{"s":"a","i":2}`, `{"s":"a\nb","i":2}`, `{"S":"case"}`, `{"s":"a","extra":[1,{"x":null}]}`, `{"i":"1"}`, `{"s":"a"} x`, `null`} {
		var got, want sample
		err := Unmarshal([]byte(s), &got, read)
		werr := json.Unmarshal([]byte(s), &want)
		if (err == nil) != (werr == nil) || (err != nil && err.Error() != werr.Error()) || !reflect.DeepEqual(got, want) {
			t.Errorf("Unmarshal(%s) = %+v, %v; json.Unmarshal %+v, %v", s, got, err, want, werr)
		}
	}
}
