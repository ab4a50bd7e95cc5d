package agentcfg

import "path/filepath"

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

// StartupPaths lists them for home and the launcher's environment (env looks a
// variable up): below HOME, and where $ZDOTDIR, $CLAUDE_CONFIG_DIR and $CODEX_HOME
// move zsh's files and the agents' directories. A variable that is not absolute
// moves nothing a program finds.
func StartupPaths(home string, env func(string) string) []StartupPath {
	var out []StartupPath
	inHome := func(rel string, dir bool) {
		out = append(out, StartupPath{Path: filepath.Join(home, rel), Dir: dir, Named: "~/" + rel})
	}
	for _, k := range known {
		inHome(k.rel, false)
	}
	if z := env("ZDOTDIR"); filepath.IsAbs(z) {
		for _, n := range zshFiles {
			out = append(out, StartupPath{Path: filepath.Join(filepath.Clean(z), n), Named: "$ZDOTDIR/" + n})
		}
	}
	for i, a := range append(agentDirs[:len(agentDirs):len(agentDirs)], startDirs...) {
		agent := i < len(agentDirs)
		out = append(out, StartupPath{Path: filepath.Join(home, a.rel), Dir: true, Named: "~/" + a.rel, Agent: agent})
		if a.env == "" {
			continue
		}
		if d := env(a.env); filepath.IsAbs(d) {
			out = append(out, StartupPath{Path: filepath.Clean(d), Dir: true, Named: "$" + a.env, Agent: agent})
		}
	}
	return out
}
