// Package fixedjson writes and reads the JSON of a few fixed record types by hand,
// byte for byte as encoding/json does, without its reflection.
//
// encoding/json builds an encoder or decoder for a type the first time it meets it,
// by reflecting over every field (and sorting them, and making closures): work a
// long-lived program does once, and a launch of agentbox, which writes and reads a
// handful of records and exits, did on every run. The writer here appends compact
// JSON exactly as json.Marshal does with HTML escaping off; indentation is then
// json.Indent's, which is what json.Encoder does too. The reader is a fast path:
// it accepts only a strict subset (keys spelt exactly as the fields' names, each
// once; strings without escapes; integers without fraction or exponent; no null)
// and says when it did not, so that its caller can hand the same bytes to
// encoding/json, which then decides what they mean or why they are refused.
package fixedjson

import (
	"strconv"
	"time"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string, escaped as json.Marshal escapes it with
// HTML escaping off: '"' and '\\' and the control characters escaped, invalid UTF-8
// replaced by U+FFFD, U+2028 and U+2029 escaped.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// Key appends an object's member name and its colon, after a comma unless it is
// the object's first member. name is one of the caller's field names: plain ASCII.
func Key(b []byte, name string) []byte {
	b = Elem(b)
	b = append(b, '"')
	b = append(b, name...)
	return append(b, '"', ':')
}

// Elem appends the comma before an array's element or an object's member, unless
// it is the first.
func Elem(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] != '{' && b[n-1] != '[' {
		b = append(b, ',')
	}
	return b
}

// AppendBool appends true or false.
func AppendBool(b []byte, v bool) []byte { return strconv.AppendBool(b, v) }

// AppendStrings appends a []string as json.Marshal does: null when nil.
func AppendStrings(b []byte, v []string) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for _, s := range v {
		b = AppendString(Elem(b), s)
	}
	return append(b, ']')
}

// AppendTime appends t as its MarshalJSON does (RFC 3339 with nanoseconds); the
// error is MarshalJSON's, for a year outside 0–9999.
func AppendTime(b []byte, t time.Time) ([]byte, error) {
	m, err := t.MarshalJSON()
	if err != nil {
		return b, err
	}
	return append(b, m...), nil
}

// AppendIndent appends compact, the output of this package's writers or
// json.Marshal, indented as json.Indent(dst, compact, "", "  ") indents it: a
// member or element per line, two spaces a level, ": " after a name, and empty
// objects and arrays left as {} and []. compact must be valid JSON without white
// space outside strings; json.Indent checks that, this does not.
func AppendIndent(dst, compact []byte) []byte {
	depth := 0
	newline := func() {
		dst = append(dst, '\n')
		for range depth {
			dst = append(dst, ' ', ' ')
		}
	}
	for i := 0; i < len(compact); i++ {
		c := compact[i]
		switch c {
		case '"':
			// Copy the string whole: its escapes end with the byte after a
			// backslash, its end at the first quote not escaped.
			j := i + 1
			for j < len(compact) && compact[j] != '"' {
				if compact[j] == '\\' {
					j++
				}
				j++
			}
			dst = append(dst, compact[i:min(j+1, len(compact))]...)
			i = j
		case '{', '[':
			dst = append(dst, c)
			if i+1 < len(compact) && (compact[i+1] == '}' || compact[i+1] == ']') {
				dst = append(dst, compact[i+1])
				i++
				continue
			}
			depth++
			newline()
		case '}', ']':
			depth--
			newline()
			dst = append(dst, c)
		case ',':
			dst = append(dst, c)
			newline()
		case ':':
			dst = append(dst, ':', ' ')
		default:
			dst = append(dst, c)
		}
	}
	return dst
}
