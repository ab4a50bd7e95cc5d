// Package tomlbound says whether a TOML document is shaped so that decoding it
// costs time and memory in proportion to its size. The decoder agentbox uses
// (github.com/BurntSushi/toml) takes time and memory quadratic in the nesting of
// inline tables and in the parts of one dotted key: a 64 KiB file of `{b=` took
// two minutes and 37 GiB of allocations to decode. Files a sandbox writes (a
// repository's .agentbox.toml, a kept Codex config) go through Check first.
package tomlbound

import "fmt"

// Max bounds both the nesting of arrays and inline tables and the parts of one
// key or table header; hand-written files stay far below it.
const Max = 16

// MaxBytes bounds the document: the decoder's cost grows faster than its size
// even for flat keys (4 MiB of "kN = 1" lines took seconds), and a configuration
// file is kilobytes.
const MaxBytes = 1 << 20

// Check reads data as TOML's lexer does — strings, comments, brackets, dotted
// keys — and returns an error when arrays and inline tables nest deeper than Max
// or a key or table header has more than Max parts, or data is larger than
// MaxBytes. It decodes nothing: what it
// passes may still be invalid TOML, which the decoder then refuses at its cost.
func Check(data []byte) error {
	if len(data) > MaxBytes {
		return fmt.Errorf("larger than %d bytes", MaxBytes)
	}
	s := scanner{data: data, inKey: true}
	return s.run()
}

type scanner struct {
	data     []byte
	i        int
	stack    []byte // open '[' and '{' of values
	inKey    bool   // before the '=' of a key-value pair
	inHeader bool   // inside a [table] or [[array of tables]] header
	parts    int    // dots seen in the current key or header
	line     int
}

func (s *scanner) run() error {
	s.line = 1
	for s.i < len(s.data) {
		c := s.data[s.i]
		switch c {
		case '#':
			for s.i < len(s.data) && s.data[s.i] != '\n' {
				s.i++
			}
			continue
		case '"', '\'':
			s.skipString(c)
			continue
		case '\n':
			s.line++
			if len(s.stack) == 0 {
				s.inKey, s.inHeader, s.parts = true, false, 0
			}
		case '[':
			if s.inKey && len(s.stack) == 0 {
				s.inHeader = true
				break
			}
			if err := s.push(c); err != nil {
				return err
			}
		case '{':
			if err := s.push(c); err != nil {
				return err
			}
			s.inKey, s.parts = true, 0
		case ']', '}':
			if s.inHeader {
				s.inHeader, s.inKey = false, false
				break
			}
			if n := len(s.stack); n > 0 {
				s.stack = s.stack[:n-1]
			}
		case ',':
			if n := len(s.stack); n > 0 && s.stack[n-1] == '{' {
				s.inKey, s.parts = true, 0
			}
		case '=':
			if !s.inHeader {
				s.inKey = false
			}
		case '.':
			if s.inKey || s.inHeader {
				if s.parts++; s.parts >= Max {
					return fmt.Errorf("line %d: a key of more than %d dotted parts", s.line, Max)
				}
			}
		}
		s.i++
	}
	return nil
}

func (s *scanner) push(c byte) error {
	if len(s.stack) >= Max {
		return fmt.Errorf("line %d: arrays and inline tables nested deeper than %d", s.line, Max)
	}
	s.stack = append(s.stack, c)
	return nil
}

// skipString moves past the string that starts at s.i with quote q: basic ("…",
// with backslash escapes) or literal ('…'), each on one line or, tripled, over
// several. An unterminated string ends the data, as the decoder then refuses it.
func (s *scanner) skipString(q byte) {
	triple := s.i+2 < len(s.data) && s.data[s.i+1] == q && s.data[s.i+2] == q
	if triple {
		s.i += 3
	} else {
		s.i++
	}
	for s.i < len(s.data) {
		c := s.data[s.i]
		switch {
		case c == '\\' && q == '"':
			if s.i+1 < len(s.data) && s.data[s.i+1] == '\n' {
				s.line++
			}
			s.i += 2
			continue
		case c == '\n' && !triple:
			return // a newline ends no such string: the decoder refuses the line
		case c == '\n':
			s.line++
		case c == q && !triple:
			s.i++
			return
		case c == q && s.i+2 < len(s.data) && s.data[s.i+1] == q && s.data[s.i+2] == q:
			// Up to two more quotes belong to the string's content.
			s.i += 3
			for n := 0; n < 2 && s.i < len(s.data) && s.data[s.i] == q; n++ {
				s.i++
			}
			return
		}
		s.i++
	}
}
