package tomlbound

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

func TestCheck(t *testing.T) {
	deep := func(open, close string, n int) string {
		return strings.Repeat(open, n) + "1" + strings.Repeat(close, n)
	}
	for _, c := range []struct {
		name, doc string
		ok        bool
	}{
		{"codex config", "model = \"o3\"\napproval_policy = \"untrusted\"\n[mcp_servers.docs]\ncommand = \"npx\"\nargs = [\"-y\", \"x\"]\nenv = { A = \"1\", B = { c = [1, [2, [3]]] } }\n[[profiles.a.b]]\nx = 1.5\n", true},
		{"dotted key at the bound", strings.Repeat("a.", Max-1) + "a = 1\n", true},
		{"dotted key past the bound", strings.Repeat("a.", Max) + "a = 1\n", false},
		{"header past the bound", "[" + strings.Repeat("a.", Max) + "a]\n", false},
		{"quoted dotted key past the bound", strings.Repeat(`"a".`, Max) + "a = 1\n", false},
		{"dotted key in an inline table", "x = { " + strings.Repeat("a.", Max) + "a = 1 }\n", false},
		{"dotted key after a comma", "x = { y = 1, " + strings.Repeat("a.", Max) + "a = 1 }\n", false},
		{"inline tables at the bound", "x = " + deep("{b=", "}", Max) + "\n", true},
		{"inline tables past the bound", "x = " + deep("{b=", "}", Max+1) + "\n", false},
		{"arrays past the bound", "x = " + deep("[", "]", Max+1) + "\n", false},
		{"arrays over lines", "x = " + deep("[\n", "\n]", Max+1) + "\n", false},
		{"mixed past the bound", "x = " + deep("[{b=", "}]", Max/2+1) + "\n", false},
		{"floats and dates are no keys", "x = [" + strings.Repeat("1.5, ", 100) + "1979-05-27T07:32:00.999Z]\n", true},
		{"brackets in strings", `x = "` + strings.Repeat("[{", 100) + `"` + "\ny = '" + strings.Repeat("[{.", 100) + "'\n", true},
		{"brackets in multi-line strings", "x = \"\"\"\n" + strings.Repeat("[{.\n", 100) + "\\\"\"\"\"\"\ny = '''" + strings.Repeat("{", 100) + "''''\n", true},
		{"brackets in comments", "# " + strings.Repeat("[{.", 100) + "\nx = 1 # " + strings.Repeat("{", 100) + "\n", true},
		{"escaped quote does not end the string", `x = "\"` + strings.Repeat("{", 100) + `"` + "\n" + "y = " + deep("[", "]", Max+1), false},
		{"larger than MaxBytes", strings.Repeat("#", MaxBytes+1), false},
		{"a string cut by a newline hides nothing", "x = \"abc\n" + "y = " + deep("[", "]", Max+1), false},
	} {
		err := Check([]byte(c.doc))
		if (err == nil) != c.ok {
			t.Errorf("%s: Check = %v, want ok %v", c.name, err, c.ok)
		}
		if c.ok {
			var v map[string]any
			if _, err := toml.Decode(c.doc, &v); err != nil {
				t.Errorf("%s: the row is meant to be valid TOML: %v", c.name, err)
			}
		}
	}
}

// TestWhatPassesDecodesInTime: the shapes that cost the decoder quadratic time,
// each as large as a kept file may be but within the bound, decode in seconds.
func TestWhatPassesDecodesInTime(t *testing.T) {
	if testing.Short() {
		t.Skip("decodes megabytes")
	}
	const size = MaxBytes - 4096
	var keys, tables strings.Builder
	for i := 0; tables.Len() < size; i++ {
		fmt.Fprintf(&tables, "k%d = %s1%s\n", i, strings.Repeat("{b=", Max-1), strings.Repeat("}", Max-1))
	}
	for i := 0; keys.Len() < size; i++ {
		keys.WriteString(strings.Repeat("a.", Max-2))
		keys.WriteString("k")
		keys.WriteString(strings.Repeat("x", i%50))
		keys.WriteString(strings.Repeat("y", i/50))
		keys.WriteString(" = 1\n")
	}
	for name, doc := range map[string]string{
		"inline tables": tables.String(),
		"dotted keys":   keys.String(),
	} {
		if err := Check([]byte(doc)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		start := time.Now()
		var v map[string]any
		if _, err := toml.Decode(doc, &v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if d := time.Since(start); d > time.Minute {
			t.Errorf("%s: %d bytes within the bound took %v to decode", name, len(doc), d)
		}
	}
}
