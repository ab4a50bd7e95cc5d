package agentcfg

import (
	"strings"
	"testing"
)

// TestStartupPathsOneSlice: the list every launch builds is allocated once, at the
// size it can reach (every variable set), not grown: a fresh process pays each
// growth in page faults. What is left is each path's own strings.
func TestStartupPathsOneSlice(t *testing.T) {
	env := func(name string) string {
		switch name {
		case "ZDOTDIR", "CLAUDE_CONFIG_DIR", "CODEX_HOME":
			return "/srv/" + strings.ToLower(name)
		}
		return ""
	}
	out := StartupPaths("/home/u", env)
	if len(out) != cap(out) {
		t.Errorf("%d paths in a slice of %d: sized for what it can list", len(out), cap(out))
	}
	var zsh, moved int
	for _, sp := range out {
		switch {
		case strings.HasPrefix(sp.Named, "$ZDOTDIR/"):
			zsh++
		case strings.HasPrefix(sp.Named, "$"):
			moved++
		}
	}
	if zsh != len(zshFiles) || moved != 2 {
		t.Fatalf("%d of zsh's files below $ZDOTDIR and %d moved agent directories, want %d and 2: %+v", zsh, moved, len(zshFiles), out)
	}
	// About two strings a path (its path and its name; 123 allocations for 59
	// paths on Go 1.26, where growing the slice instead made it 130).
	allocs := testing.AllocsPerRun(20, func() { StartupPaths("/home/u", env) })
	if max := float64(2*len(out) + 5); allocs > max {
		t.Errorf("%.0f allocations for %d paths, want at most %.0f (one slice)", allocs, len(out), max)
	}
}
