// Package gitconfig reads Git's config format without running Git: the audit and the
// protected-path collector read files a sandbox may have written, and Git would act on
// them. It parses as Git parses (an error where Git refuses a file), finds the files
// Git reads for every repository and the ones includes name, and writes a config back
// (audit --fix). It never follows more than Git does and never blocks on a FIFO.
package gitconfig

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"unicode"
)

// Entry is one variable of a Git config file, as git-config(1) describes the
// format: Section and Key lower-cased, Subsection kept as written.
type Entry struct {
	Section    string
	Subsection string
	Key        string
	Value      string
	NoValue    bool // "key" alone on a line: a boolean true
	Line       int
}

// Name is the dotted name git config prints: section.subsection.key.
func (e Entry) Name() string {
	if e.Subsection == "" {
		return e.Section + "." + e.Key
	}
	return e.Section + "." + e.Subsection + "." + e.Key
}

// Bool interprets the value as Git does for booleans.
func (e Entry) Bool() bool {
	if e.NoValue {
		return true
	}
	switch strings.ToLower(strings.TrimSpace(e.Value)) {
	case "true", "yes", "on", "1":
		return true
	}
	return false
}

// ReadFile parses the Git config file at path. It never runs git: the audit
// reads configs that a sandbox may have written, and git would act on them. It
// follows symlinks as Git does, but reads only a regular file, opened non-blocking
// (a FIFO planted as a config cannot hang the launcher), and at most MaxFileSize.
func ReadFile(path string) ([]Entry, error) {
	entries, err := ReadHostFile(path)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	return entries, nil
}

// Parse parses Git's config format. It is lenient where Git is lenient and
// returns an error where Git would refuse the file, so that a file Git rejects is
// not silently read differently.
func Parse(r io.Reader) ([]Entry, error) {
	br := bufio.NewReader(r)
	p := configParser{r: br, line: 1}
	return p.parse()
}

type configParser struct {
	r       *bufio.Reader
	line    int
	section string
	sub     string
	entries []Entry
}

func (p *configParser) next() (rune, bool) {
	c, _, err := p.r.ReadRune()
	if err != nil {
		return 0, false
	}
	// Git reads "\r\n" as "\n" everywhere in a config file; a CRLF file must not
	// parse as an error here (or with "\r" glued to keys and values).
	if c == '\r' {
		if b, err := p.r.Peek(1); err == nil && b[0] == '\n' {
			_, _, _ = p.r.ReadRune()
			c = '\n'
		}
	}
	if c == '\n' {
		p.line++
	}
	return c, true
}

func (p *configParser) unread(c rune) {
	_ = p.r.UnreadRune()
	if c == '\n' {
		p.line--
	}
}

func (p *configParser) skipLine() {
	for {
		c, ok := p.next()
		if !ok || c == '\n' {
			return
		}
	}
}

func (p *configParser) parse() ([]Entry, error) {
	// A UTF-8 byte-order mark is skipped, as Git does.
	if b, err := p.r.Peek(3); err == nil && string(b) == "\xef\xbb\xbf" {
		_, _ = p.r.Discard(3)
	}
	for {
		c, ok := p.next()
		if !ok {
			return p.entries, nil
		}
		switch {
		case c == '\n' || unicode.IsSpace(c):
		case c == '#' || c == ';':
			p.skipLine()
		case c == '[':
			if err := p.header(); err != nil {
				return nil, err
			}
		case isKeyChar(c) && unicode.IsLetter(c):
			if p.section == "" {
				return nil, fmt.Errorf("line %d: variable outside a section", p.line)
			}
			p.unread(c)
			if err := p.variable(); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("line %d: unexpected %q", p.line, c)
		}
	}
}

func (p *configParser) header() error {
	var name strings.Builder
	for {
		c, ok := p.next()
		if !ok {
			return fmt.Errorf("line %d: unterminated section header", p.line)
		}
		switch {
		case c == ']':
			p.setSection(name.String(), "", true)
			return nil
		case unicode.IsSpace(c) && c != '\n':
			return p.subsection(name.String())
		case isKeyChar(c) || c == '.':
			name.WriteRune(c)
		default:
			return fmt.Errorf("line %d: bad character %q in section name", p.line, c)
		}
	}
}

func (p *configParser) setSection(name, sub string, dotted bool) {
	name = strings.ToLower(name)
	// [section.sub] is the deprecated form of [section "sub"], sub lower-cased.
	if i := strings.IndexByte(name, '.'); dotted && i >= 0 {
		name, sub = name[:i], name[i+1:]
	}
	p.section, p.sub = name, sub
}

func (p *configParser) subsection(name string) error {
	c, ok := p.next()
	for ok && (c == ' ' || c == '\t' || c == '\r') {
		c, ok = p.next()
	}
	if !ok || c != '"' {
		return fmt.Errorf("line %d: expected quoted subsection", p.line)
	}
	var sub strings.Builder
	for {
		c, ok = p.next()
		if !ok || c == '\n' {
			return fmt.Errorf("line %d: unterminated subsection", p.line)
		}
		if c == '"' {
			break
		}
		if c == '\\' {
			if c, ok = p.next(); !ok || c == '\n' {
				return fmt.Errorf("line %d: bad escape in subsection", p.line)
			}
		}
		sub.WriteRune(c)
	}
	if c, ok = p.next(); !ok || c != ']' {
		return fmt.Errorf("line %d: expected ] after subsection", p.line)
	}
	p.setSection(name, sub.String(), false)
	return nil
}

func isKeyChar(c rune) bool {
	return c < 0x80 && (unicode.IsLetter(c) || unicode.IsDigit(c) || c == '-')
}

func (p *configParser) variable() error {
	line := p.line
	var key strings.Builder
	c, ok := p.next()
	for ok && isKeyChar(c) {
		key.WriteRune(c)
		c, ok = p.next()
	}
	for ok && (c == ' ' || c == '\t') {
		c, ok = p.next()
	}
	e := Entry{Section: p.section, Subsection: p.sub, Key: strings.ToLower(key.String()), Line: line}
	if !ok || c == '\n' || c == '#' || c == ';' {
		if ok && c != '\n' {
			p.skipLine()
		}
		e.NoValue = true
		p.entries = append(p.entries, e)
		return nil
	}
	if c != '=' {
		return fmt.Errorf("line %d: bad character %q after key %q", p.line, c, key.String())
	}
	v, err := p.value()
	if err != nil {
		return err
	}
	e.Value = v
	p.entries = append(p.entries, e)
	return nil
}

// value reads a value after '=' to the end of its (possibly continued) line,
// handling quotes, escapes and trailing comments the way Git does.
func (p *configParser) value() (string, error) {
	var b strings.Builder
	quoted := false
	pendingSpace := 0
	started := false
	for {
		c, ok := p.next()
		if !ok || c == '\n' {
			if quoted {
				return "", fmt.Errorf("line %d: unterminated quote", p.line)
			}
			return cString(b.String()), nil
		}
		if !quoted && (c == '#' || c == ';') {
			p.skipLine()
			return cString(b.String()), nil
		}
		// Git's isspace takes a lone "\r" too: it is one space of the value (a
		// separator of an alias's or a tool's words), not a byte of a word.
		if !quoted && (c == ' ' || c == '\t' || c == '\r') {
			if started {
				pendingSpace++
			}
			continue
		}
		for ; pendingSpace > 0; pendingSpace-- {
			b.WriteByte(' ')
		}
		started = true
		switch c {
		case '"':
			quoted = !quoted
		case '\\':
			e, ok := p.next()
			if !ok {
				return "", fmt.Errorf("line %d: bad escape", p.line)
			}
			switch e {
			case '\n': // continuation
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'b':
				b.WriteByte('\b') // a backspace character, as Git stores it
			case '\\', '"':
				b.WriteRune(e)
			default:
				return "", fmt.Errorf("line %d: bad escape \\%c", p.line, e)
			}
		default:
			b.WriteRune(c)
		}
	}
}

// cString cuts s at its first NUL: Git keeps values as C strings, so that is all of
// the value Git ever uses.
func cString(s string) string {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return s[:i]
	}
	return s
}
