package fixedjson

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// Reader reads one JSON value of a fixed type from b on the fast path. Every method
// returns false for anything outside the subset it takes; the caller then gives up
// on the fast path and lets encoding/json read the same bytes. Everything the
// Reader accepts, encoding/json accepts too, into the same value.
type Reader struct {
	b []byte
	i int
}

// NewReader reads b.
func NewReader(b []byte) *Reader { return &Reader{b: b} }

func (r *Reader) space() {
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// consume skips white space and then c; false when the next byte is not c.
func (r *Reader) consume(c byte) bool {
	r.space()
	if r.i < len(r.b) && r.b[r.i] == c {
		r.i++
		return true
	}
	return false
}

// End says whether nothing but white space is left.
func (r *Reader) End() bool {
	r.space()
	return r.i == len(r.b)
}

// Member is n when ok, else -1: what a member function of Object returns for its
// field number n and whether it read the value.
func Member(n int, ok bool) int {
	if !ok {
		return -1
	}
	return n
}

// Object reads an object, calling member for each member with its name; member
// reads the value and returns the field's number (0–63), or -1 for a name it does
// not know or a value it did not read. A name met twice is refused too: encoding/json
// would merge the two values.
func (r *Reader) Object(member func(r *Reader, name []byte) int) bool {
	if !r.consume('{') {
		return false
	}
	if r.consume('}') {
		return true
	}
	var seen uint64
	for {
		name, ok := r.str()
		if !ok || !r.consume(':') {
			return false
		}
		n := member(r, name)
		if n < 0 || n > 63 || seen&(1<<n) != 0 {
			return false
		}
		seen |= 1 << n
		if r.consume('}') {
			return true
		}
		if !r.consume(',') {
			return false
		}
	}
}

// Array reads an array, calling elem for each element; elem returns false when it
// did not read one. An empty array calls none.
func (r *Reader) Array(elem func(r *Reader) bool) bool {
	if !r.consume('[') {
		return false
	}
	if r.consume(']') {
		return true
	}
	for {
		if !elem(r) {
			return false
		}
		if r.consume(']') {
			return true
		}
		if !r.consume(',') {
			return false
		}
	}
}

// str reads a string without escapes, of valid UTF-8 and no control characters,
// returning its bytes inside the quotes.
func (r *Reader) str() ([]byte, bool) {
	if !r.consume('"') {
		return nil, false
	}
	start, ascii := r.i, true
	for ; r.i < len(r.b); r.i++ {
		c := r.b[r.i]
		switch {
		case c == '"':
			s := r.b[start:r.i]
			r.i++
			if !ascii && !utf8.Valid(s) {
				return nil, false
			}
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

// String reads a string.
func (r *Reader) String(v *string) bool {
	s, ok := r.str()
	if ok {
		*v = string(s)
	}
	return ok
}

// Strings reads an array of strings; [] is an empty slice, not nil, as encoding/json
// makes it.
func (r *Reader) Strings(v *[]string) bool {
	out := []string{}
	ok := r.Array(func(r *Reader) bool {
		var s string
		if !r.String(&s) {
			return false
		}
		out = append(out, s)
		return true
	})
	if ok {
		*v = out
	}
	return ok
}

// Bool reads true or false.
func (r *Reader) Bool(v *bool) bool {
	r.space()
	rest := r.b[r.i:]
	switch {
	case len(rest) >= 4 && string(rest[:4]) == "true":
		*v, r.i = true, r.i+4
	case len(rest) >= 5 && string(rest[:5]) == "false":
		*v, r.i = false, r.i+5
	default:
		return false
	}
	return r.delimited()
}

// delimited says whether the literal or number just read ends where the grammar
// lets it end (so that "truex" or "12.5" is not taken for true or 12).
func (r *Reader) delimited() bool {
	if r.i == len(r.b) {
		return true
	}
	switch r.b[r.i] {
	case ' ', '\t', '\n', '\r', ',', '}', ']':
		return true
	}
	return false
}

// digits reads an integer literal: -?(0|[1-9][0-9]*), with no fraction or exponent.
func (r *Reader) digits() ([]byte, bool) {
	r.space()
	start := r.i
	if r.i < len(r.b) && r.b[r.i] == '-' {
		r.i++
	}
	first := r.i
	for r.i < len(r.b) && r.b[r.i] >= '0' && r.b[r.i] <= '9' {
		r.i++
	}
	if r.i == first || (r.b[first] == '0' && r.i-first > 1) || !r.delimited() {
		return nil, false
	}
	return r.b[start:r.i], true
}

// Int reads an int.
func (r *Reader) Int(v *int) bool {
	n, ok := r.signed(strconv.IntSize)
	*v = int(n)
	return ok
}

// Int64 reads an int64.
func (r *Reader) Int64(v *int64) bool {
	n, ok := r.signed(64)
	*v = n
	return ok
}

// Uint32 reads a uint32.
func (r *Reader) Uint32(v *uint32) bool {
	n, ok := r.unsigned(32)
	*v = uint32(n)
	return ok
}

// Uint16 reads a uint16.
func (r *Reader) Uint16(v *uint16) bool {
	n, ok := r.unsigned(16)
	*v = uint16(n)
	return ok
}

// signed reads an integer that fits bits bits, as encoding/json reads one into an
// intN field.
func (r *Reader) signed(bits int) (int64, bool) {
	d, ok := r.digits()
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(string(d), 10, bits)
	return n, err == nil
}

// unsigned reads a non-negative integer that fits bits bits (a minus sign, even
// "-0", is left to encoding/json).
func (r *Reader) unsigned(bits int) (uint64, bool) {
	d, ok := r.digits()
	if !ok || d[0] == '-' {
		return 0, false
	}
	n, err := strconv.ParseUint(string(d), 10, bits)
	return n, err == nil
}

// Time reads a string through time.Time's UnmarshalJSON, as encoding/json does.
func (r *Reader) Time(v *time.Time) bool {
	r.space()
	start := r.i
	if _, ok := r.str(); !ok {
		return false
	}
	var t time.Time
	if t.UnmarshalJSON(r.b[start:r.i]) != nil {
		return false
	}
	*v = t
	return true
}

// Unmarshal reads b into v by read, the fast path of v's type, when it takes the
// whole of b, and by json.Unmarshal otherwise: the value, or the error, is
// json.Unmarshal's either way. v is set only from a complete fast read.
func Unmarshal[T any](b []byte, v *T, read func(r *Reader, v *T) bool) error {
	var fast T
	if r := NewReader(b); read(r, &fast) && r.End() {
		*v = fast
		return nil
	}
	return json.Unmarshal(b, v)
}
