// Package fixedjsontest fills values of any type, and checks fast paths against
// encoding/json, for the tests that compare fixedjson's hand-written encoders and
// readers with encoding/json.
package fixedjsontest

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/fixedjson"
)

// Fill sets every exported field reachable from v (a pointer) to a random value:
// strings with quotes, escapes, control characters, HTML characters, multi-byte
// and invalid UTF-8, U+2028; integers across their range; nil, empty and filled
// slices; nil and set pointers; zero and non-zero times in several zones. With full,
// nothing is left zero, nil or empty, so that every field shows in the output and a
// field an encoder forgot cannot hide behind omitempty.
func Fill(v any, rnd *rand.Rand, full bool) {
	f := filler{rnd: rnd, full: full, pieces: pieces}
	f.fill(reflect.ValueOf(v).Elem())
}

// FillPlain is Fill with strings JSON writes without escapes (no quotes, backslashes,
// control or HTML characters, U+2028 or invalid UTF-8): what readers that take no
// escapes must take.
func FillPlain(v any, rnd *rand.Rand, full bool) {
	f := filler{rnd: rnd, full: full, pieces: plainPieces}
	f.fill(reflect.ValueOf(v).Elem())
}

type filler struct {
	rnd    *rand.Rand
	full   bool
	pieces []string
}

var pieces = []string{
	"a", "Z", "0", "/", " ", "-", "_", ".", `"`, `\`, "\n", "\t", "\r", "\b", "\f",
	"\x00", "\x1f", "\x7f", "<", ">", "&", "é", "日本", "\u2028", "\u2029", "\xff",
	"\xe2\x82", "😀", "\ufffd", "/tmp/repo", "agentbox",
}

var plainPieces = []string{"a", "Z", "0", "/", " ", "-", "_", ".", "é", "日本", "😀", "\ufffd", "/tmp/repo"}

func (f *filler) randString() string {
	n := f.rnd.IntN(6)
	if f.full && n == 0 {
		n = 1
	}
	s := ""
	for range n {
		s += f.pieces[f.rnd.IntN(len(f.pieces))]
	}
	return s
}

var timeType = reflect.TypeFor[time.Time]()

func (f *filler) fill(v reflect.Value) {
	rnd, full := f.rnd, f.full
	if v.Type() == timeType {
		if !full && rnd.IntN(4) == 0 {
			v.Set(reflect.ValueOf(time.Time{}))
			return
		}
		// Years 1–9998 in UTC: within the range time.Time's MarshalJSON accepts
		// (0–9999) in any zone.
		const year1, year9999 = -62135596800, 253370764800
		sec := year1 + rnd.Int64N(year9999-year1)
		t := time.Unix(sec, rnd.Int64N(1e9))
		switch rnd.IntN(3) {
		case 0:
			t = t.UTC()
		case 1:
			t = t.In(time.FixedZone("", (rnd.IntN(48)-24)*1800))
		}
		v.Set(reflect.ValueOf(t))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(f.randString())
	case reflect.Bool:
		v.SetBool(full || rnd.IntN(2) == 0)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := v.Type().Bits()
		var n int64
		switch rnd.IntN(4) {
		case 0:
			n = 0
		case 1:
			n = rnd.Int64N(1000)
		case 2:
			n = -rnd.Int64N(1000)
		default:
			n = int64(rnd.Uint64()) >> (64 - bits)
		}
		if full && n == 0 {
			n = 1
		}
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		bits := v.Type().Bits()
		var n uint64
		switch rnd.IntN(3) {
		case 0:
			n = 0
		case 1:
			n = rnd.Uint64N(1000)
		default:
			n = rnd.Uint64() >> (64 - bits)
		}
		if full && n == 0 {
			n = 1
		}
		v.SetUint(n)
	case reflect.Slice:
		n := rnd.IntN(4)
		switch {
		case full && n == 0:
			n = 1
		case n == 0 && rnd.IntN(2) == 0:
			v.Set(reflect.Zero(v.Type()))
			return
		}
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			f.fill(s.Index(i))
		}
		v.Set(s)
	case reflect.Pointer:
		if !full && rnd.IntN(3) == 0 {
			v.Set(reflect.Zero(v.Type()))
			return
		}
		p := reflect.New(v.Type().Elem())
		f.fill(p.Elem())
		v.Set(p)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				f.fill(v.Field(i))
			}
		}
	default:
		panic("fixedjsontest: no filler for " + v.Type().String())
	}
}

// CheckReadsWritten writes 2,000 values of T filled by Fill and FillPlain (some
// with every field set) with write, and checks that read, a fixedjson fast path,
// takes every one that needed no escape into the value json.Unmarshal reads (a field
// added to T and not to read fails here: the fast path refuses the unknown name).
func CheckReadsWritten[T any](t *testing.T, seed uint64, write func(*T) ([]byte, error), read func(*fixedjson.Reader, *T) bool) {
	t.Helper()
	rnd := rand.New(rand.NewPCG(36, seed))
	taken := 0
	for i := range 2000 {
		var v T
		if i%2 == 0 {
			FillPlain(&v, rnd, i%4 == 0)
		} else {
			Fill(&v, rnd, i%3 == 0)
		}
		b, err := write(&v)
		if err != nil {
			t.Fatal(err)
		}
		if !CheckAgainstJSON(t, b, read) {
			if !bytes.Contains(b, []byte{'\\'}) {
				t.Fatalf("value %d: the fast path refused %s", i, b)
			}
			continue
		}
		taken++
	}
	if taken < 1000 {
		t.Errorf("the fast path took %d of 2000 values, want every plain one", taken)
	}
}

// CheckAgainstJSON reads b by the fast path read and, when it takes b whole, checks
// that json.Unmarshal reads b into the same value; it says whether read took b.
func CheckAgainstJSON[T any](t *testing.T, b []byte, read func(*fixedjson.Reader, *T) bool) bool {
	t.Helper()
	var got T
	if r := fixedjson.NewReader(b); !read(r, &got) || !r.End() {
		return false
	}
	var want T
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatalf("fast path took %q, encoding/json refuses it: %v", b, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: fast path read %+v, encoding/json %+v", b, got, want)
	}
	return true
}
