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
		case "ZDOTDIR":
			return "/srv/zdotdir"
		case "CLAUDE_CONFIG_DIR":
			return "/srv/claude"
		case "CODEX_HOME":
			return "/srv/codex"
		case "XDG_CONFIG_HOME":
			return "/srv/config"
		case "XDG_DATA_HOME":
			return "/srv/data"
		}
		return ""
	}
	out := StartupPaths("/home/u", env)
	if len(out) != cap(out) {
		t.Errorf("%d paths in a slice of %d: sized for what it can list", len(out), cap(out))
	}
	var zsh, xdg, moved int
	for _, sp := range out {
		switch {
		case strings.HasPrefix(sp.Named, "$ZDOTDIR/"):
			zsh++
		case strings.HasPrefix(sp.Named, "$XDG_"):
			xdg++
		case strings.HasPrefix(sp.Named, "$"):
			moved++
		}
	}
	if zsh != len(zshFiles) || moved != 2 || xdg == 0 {
		t.Fatalf("%d of zsh's files below $ZDOTDIR, %d moved agent directories and %d paths below the XDG directories, want %d, 2 and some: %+v", zsh, moved, xdg, len(zshFiles), out)
	}
	// About two strings a path (its path and its name; 123 allocations for 59
	// paths on Go 1.26, where growing the slice instead made it 130).
	allocs := testing.AllocsPerRun(20, func() { StartupPaths("/home/u", env) })
	if max := float64(2*len(out) + 5); allocs > max {
		t.Errorf("%.0f allocations for %d paths, want at most %.0f (one slice)", allocs, len(out), max)
	}
}
