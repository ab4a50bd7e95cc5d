package gitconfig

import (
	"fmt"
	"strings"
)

// Format writes entries as a Git config file, in order: the comment line header
// (without its "# "), a section header whenever the section changes, then one
// quoted "key = value" per entry.
func Format(header string, entries []Entry) string {
	var b strings.Builder
	b.WriteString("# " + header + "\n")
	cur := "\x00"
	for _, e := range entries {
		head := e.Section + "\x00" + e.Subsection
		if head != cur {
			if e.Subsection != "" {
				fmt.Fprintf(&b, "[%s \"%s\"]\n", e.Section, escape(e.Subsection, false))
			} else {
				fmt.Fprintf(&b, "[%s]\n", e.Section)
			}
			cur = head
		}
		if e.NoValue {
			fmt.Fprintf(&b, "\t%s\n", e.Key)
			continue
		}
		fmt.Fprintf(&b, "\t%s = \"%s\"\n", e.Key, escape(e.Value, true))
	}
	return b.String()
}

// escape escapes s for a quoted config value (value: also newline, tab and
// backspace) or a subsection name.
func escape(s string, value bool) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\\' || r == '"':
			b.WriteByte('\\')
			b.WriteRune(r)
		case value && r == '\n':
			b.WriteString(`\n`)
		case value && r == '\t':
			b.WriteString(`\t`)
		case value && r == '\b':
			b.WriteString(`\b`)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
