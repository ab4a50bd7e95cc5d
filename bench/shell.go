package bench

import (
	"fmt"
	"strconv"
	"strings"
)

// splitShell splits what compat.Format prints (the --dry-run --backend bwrap argv)
// into words: bare words, '…' with '\” inside, bash's $'…' with \\, \', \n, \t and
// \xHH escapes, and backslash-newline continuations between words.
func splitShell(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s) && s[i+1] == '\n':
			i += 2
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
			i++
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("unterminated quote at byte %d", i)
			}
			cur.WriteString(s[i+1 : i+1+end])
			inWord = true
			i += end + 2
		case c == '\\' && i+1 < len(s):
			cur.WriteByte(s[i+1])
			inWord = true
			i += 2
		case c == '$' && i+1 < len(s) && s[i+1] == '\'':
			n, err := ansiC(s[i+2:], &cur)
			if err != nil {
				return nil, fmt.Errorf("at byte %d: %w", i, err)
			}
			inWord = true
			i += 2 + n
		default:
			cur.WriteByte(c)
			inWord = true
			i++
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// ansiC decodes the body of $'…' up to and including its closing quote into b and
// returns how many bytes it consumed.
func ansiC(s string, b *strings.Builder) (int, error) {
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == '\'':
			return i + 1, nil
		case c == '\\' && i+1 < len(s):
			switch e := s[i+1]; e {
			case 'n':
				b.WriteByte('\n')
				i += 2
			case 't':
				b.WriteByte('\t')
				i += 2
			case 'x':
				if i+4 > len(s) {
					return 0, fmt.Errorf("short \\x escape")
				}
				v, err := strconv.ParseUint(s[i+2:i+4], 16, 8)
				if err != nil {
					return 0, fmt.Errorf("bad \\x escape %q", s[i:i+4])
				}
				b.WriteByte(byte(v))
				i += 4
			default:
				b.WriteByte(e)
				i += 2
			}
		default:
			b.WriteByte(c)
			i++
		}
	}
	return 0, fmt.Errorf("unterminated $'")
}
