package config

import (
	"fmt"
	"sort"
	"strings"

	"github.com/agentbox/agentbox/internal/cli"
)

// tableMisspelt explains a top-level table that is not a flag: [profiles.x] meant
// [profile.x]. It returns the table header's line and the reason.
func tableMisspelt(key string, sub map[string]any, lines keyIndex) (int, string) {
	line := 0
	for k, n := range lines {
		t, rest, _ := strings.Cut(k, "\x00")
		if rest == "" && (t == key || strings.HasPrefix(t, key+".")) && (line == 0 || n < line) {
			line = n
		}
	}
	reason := "not a table: keys are exec's flag names (see agentbox exec --help)"
	if key != "profile" && cli.Suggest(key, []string{"profile"}) != "" {
		names := make([]string, 0, len(sub))
		for n := range sub {
			names = append(names, n)
		}
		sort.Strings(names)
		name := "NAME"
		if len(names) > 0 {
			name = names[0]
		}
		reason = fmt.Sprintf("no such table: did you mean [profile.%s]?", name)
	}
	return line, reason
}
