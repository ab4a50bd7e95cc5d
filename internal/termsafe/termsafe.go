// Package termsafe makes text that agentbox did not write itself — file names, refs,
// commit messages, config values and error messages naming them, anything from the
// repository or the sandbox — safe to print on the operator's terminal. A terminal
// takes some characters as commands: escape sequences (ESC, and the 8-bit CSI and
// OSC among the C1 controls) move the cursor, rewrite lines, set the window title or
// the clipboard; CR and BS overwrite what was printed; bidirectional overrides make
// a line read differently from its bytes (CVE-2021-42574, "Trojan Source"). Every one
// of them, and every byte that is not valid UTF-8, is printed as a visible escape
// instead (\x1b, \r, \u202e, \xff), so the bytes reaching the terminal carry none.
//
// String is for one-line values (it escapes newline and tab too), Quote for paths in
// messages (quoted when they need it), Writer for multi-line output (a diff, a report)
// that keeps newline and tab, JSONWriter for a JSON document (--json), which it keeps
// the same document. Do not use the others for output meant for programs
// (--porcelain-like formats, a patch piped to a file): those keep their bytes.
package termsafe

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Unsafe reports whether the terminal could take r as a command or as a change of
// the text's direction: the C0 controls, DEL, the C1 controls U+0080–U+009F, the
// bidirectional embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069),
// the directional marks (U+200E, U+200F, U+061C) and the line and paragraph
// separators U+2028, U+2029.
func Unsafe(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	case r == 0x200e, r == 0x200f, r == 0x061c, r == 0x2028, r == 0x2029:
		return true
	}
	return false
}

// Safe reports whether s can be printed as it is: valid UTF-8 without an Unsafe rune.
func Safe(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, Unsafe)
}

// String returns s with every Unsafe rune and every invalid byte escaped, on one line.
func String(s string) string {
	if Safe(s) {
		return s
	}
	return string(appendEscaped(nil, []byte(s), false))
}

// Quote returns s as it is when it is safe and has no blank, quote or backslash;
// otherwise s in double quotes, Go syntax, with every Unsafe rune escaped (strconv's
// quoting already escapes what Go deems unprintable, bidi controls included; the rest
// is checked here).
func Quote(s string) string {
	if Safe(s) && !strings.ContainsAny(s, " \"'\\") {
		return s
	}
	q := strconv.Quote(s)
	if !Safe(q) {
		q = String(q)
	}
	return q
}

// Sprintf formats, then escapes the result as String does: a message on one line.
func Sprintf(format string, args ...any) string {
	return String(fmt.Sprintf(format, args...))
}

// appendEscaped appends p to out with every Unsafe rune and invalid byte escaped;
// with keepLines, newline and tab pass as they are.
func appendEscaped(out, p []byte, keepLines bool) []byte {
	for i := 0; i < len(p); {
		r, n := utf8.DecodeRune(p[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			out = fmt.Appendf(out, `\x%02x`, p[i])
		case keepLines && (r == '\n' || r == '\t'):
			out = append(out, byte(r))
		case r == '\n':
			out = append(out, `\n`...)
		case r == '\r':
			out = append(out, `\r`...)
		case r == '\t':
			out = append(out, `\t`...)
		case r < 0x80 && Unsafe(r):
			out = fmt.Appendf(out, `\x%02x`, r)
		case Unsafe(r):
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, p[i:i+n]...)
		}
		i += n
	}
	return out
}

// appendJSONEscaped appends p, JSON text, to out with every Unsafe rune but newline
// and tab written as its \u escape, and every invalid byte as \ufffd (what a JSON
// reader takes it for). The JSON grammar is ASCII outside strings and lets no control
// stand raw inside one, so an Unsafe rune is always within a string, where its
// escape decodes to the rune itself: the document stays the same values.
// encoding/json escapes the C0 controls and U+2028, U+2029, but not the C1 controls,
// DEL or the bidi controls, which a terminal acts on (CSI 0x9b, OSC 0x9d…0x9c).
func appendJSONEscaped(out, p []byte) []byte {
	for i := 0; i < len(p); {
		r, n := utf8.DecodeRune(p[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			out = append(out, `\ufffd`...)
		case r == '\n' || r == '\t' || !Unsafe(r):
			out = append(out, p[i:i+n]...)
		default:
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += n
	}
	return out
}

// Writer escapes what is written through it as String does, but keeps newline and
// tab, for multi-line output. A UTF-8 sequence split across two Writes is held back
// until it is complete; Flush writes what is held (escaped, since it never completed).
type Writer struct {
	w    io.Writer
	held []byte
	json bool // JSON text: escapes in JSON's syntax (appendJSONEscaped)
}

// NewWriter returns a Writer writing to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// NewJSONWriter returns a Writer for JSON text written to w: it writes every Unsafe
// rune as a JSON escape, so that the document reaches a terminal without a byte the
// terminal acts on and a JSON reader still decodes every string to the same value.
func NewJSONWriter(w io.Writer) *Writer { return &Writer{w: w, json: true} }

// escape is appendEscaped or appendJSONEscaped, as e's output wants.
func (e *Writer) escape(out, p []byte) []byte {
	if e.json {
		return appendJSONEscaped(out, p)
	}
	return appendEscaped(out, p, true)
}

// Inner is the writer e writes to; SetInner replaces it (termout.Bounded does, so
// that escaping and a bounded terminal write compose).
func (e *Writer) Inner() io.Writer { return e.w }

// SetInner makes e write to w from now on.
func (e *Writer) SetInner(w io.Writer) { e.w = w }

func (e *Writer) Write(p []byte) (int, error) {
	buf := append(e.held, p...)
	e.held = nil
	// Hold back an incomplete UTF-8 sequence at the end (at most 3 bytes).
	for k := 1; k <= 3 && k <= len(buf); k++ {
		tail := buf[len(buf)-k:]
		if utf8.RuneStart(tail[0]) {
			if !utf8.FullRune(tail) {
				e.held = append([]byte(nil), tail...)
				buf = buf[:len(buf)-k]
			}
			break
		}
	}
	if _, err := e.w.Write(e.escape(make([]byte, 0, len(buf)+16), buf)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes a sequence held back at the end of the last Write.
func (e *Writer) Flush() error {
	if len(e.held) == 0 {
		return nil
	}
	_, err := e.w.Write(e.escape(nil, e.held))
	e.held = nil
	return err
}
