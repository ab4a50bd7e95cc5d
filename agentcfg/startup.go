package agentcfg

import (
	"path/filepath"
	"strings"
)

// StartupPath is a file or directory that the operator's shell, desktop session
// or agent runs or reads as code at its next start: the known files, zsh's below
// $ZDOTDIR, the start-up directories and the agents' own directories — the paths
// the kept-path audit covers, as the operator's programs name them (unresolved).
type StartupPath struct {
	Path  string
	Dir   bool
	Named string // how a message names it: "~/.bashrc", "$ZDOTDIR/.zshrc"
	// Agent: an agent's directory (~/.claude), whose agent writes its own state
	// there; a kept one is the user's choice, audited, not made read-only.
	Agent bool
}

// xdgMoves are the variables that move what lies below ~/.config and ~/.local/share
// (the XDG base directories).
var xdgMoves = [...]struct{ prefix, env string }{
	{".config/", "XDG_CONFIG_HOME"}, {".local/share/", "XDG_DATA_HOME"},
}

// StartupPaths lists them for home and the launcher's environment (env looks a
// variable up): below HOME, and where $ZDOTDIR, $CLAUDE_CONFIG_DIR and $CODEX_HOME
// move zsh's files and the agents' directories, and $XDG_CONFIG_HOME and
// $XDG_DATA_HOME what lies below ~/.config and ~/.local/share. A variable that is
// not absolute moves nothing a program finds.
func StartupPaths(home string, env func(string) string) []StartupPath {
	// Sized for every path it can list: this runs on every launch, and each
	// growth of the slice would be fresh memory of a fresh process (page faults).
	out := make([]StartupPath, 0, maxStartupPaths())
	inHome := func(rel string, dir, agent bool) {
		out = append(out, StartupPath{Path: filepath.Join(home, rel), Dir: dir, Named: "~/" + rel, Agent: agent})
		// fish, the desktop's autostart, systemd's user manager and
		// bash-completion look below $XDG_CONFIG_HOME and $XDG_DATA_HOME where
		// they are set, instead of ~/.config and ~/.local/share.
		for _, m := range xdgMoves {
			if rest, ok := strings.CutPrefix(rel, m.prefix); ok {
				if d := env(m.env); filepath.IsAbs(d) {
					out = append(out, StartupPath{Path: d + "/" + rest, Dir: dir, Named: "$" + m.env + "/" + rest, Agent: agent})
				}
			}
		}
	}
	for _, k := range known {
		inHome(k.rel, false, false)
	}
	if z := env("ZDOTDIR"); filepath.IsAbs(z) {
		for _, n := range zshFiles {
			// Not filepath.Join'd: its Clean would take a ".." before the symlink it
			// follows, where zsh's open(2) takes it after ($HOME/link/..).
			out = append(out, StartupPath{Path: z + "/" + n, Named: "$ZDOTDIR/" + n})
		}
	}
	for i, dirs := range [...][]agentDir{agentDirs, startDirs} {
		agent := i == 0 // an agent writes its own state in its directory
		for _, a := range dirs {
			inHome(a.rel, true, agent)
			if a.env == "" {
				continue
			}
			if d := env(a.env); filepath.IsAbs(d) {
				out = append(out, StartupPath{Path: d, Dir: true, Named: "$" + a.env, Agent: agent})
			}
		}
	}
	return out
}

// maxStartupPaths is how many paths StartupPaths lists with every variable set.
func maxStartupPaths() int {
	n := len(zshFiles)
	inHome := func(rel string) {
		n++
		for _, m := range xdgMoves {
			if strings.HasPrefix(rel, m.prefix) {
				n++
			}
		}
	}
	for _, k := range known {
		inHome(k.rel)
	}
	for _, dirs := range [...][]agentDir{agentDirs, startDirs} {
		for _, a := range dirs {
			inHome(a.rel)
			if a.env != "" {
				n++
			}
		}
	}
	return n
}
