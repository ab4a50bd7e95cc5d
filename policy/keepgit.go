package policy

import (
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/gitguard/gitconfig"
	"github.com/agentbox/agentbox/internal/hostpath"
)

// gitHostPaths are the files and directories the operator's Git reads or runs from
// in every repository, as the launcher's environment places them: the global and
// system config files (GIT_CONFIG_GLOBAL, $XDG_CONFIG_HOME/git/config, ~/.gitconfig),
// the directory $XDG_CONFIG_HOME/git (attributes, ignore), every file those configs
// include (followed as Git follows them, missing ones too: the session could
// create them), and every path their values name: the directories of
// core.hooksPath and init.templateDir, the programs of core.pager, credential.helper
// or a filter, a signing key's allowed signers. Which keys run what is the audit's
// table; here every path counts, so that a key it does not know fails closed.
// A kept path holding any of them would let the session plant what every later Git
// of the operator's runs; the Git audit covers only the repository.
func gitHostPaths(home string, getenv func(string) string) []string {
	out := gitconfig.HostConfigFiles(func(k string) string {
		if k == "HOME" {
			return home
		}
		return getenv(k)
	})
	if xdg := getenv("XDG_CONFIG_HOME"); filepath.IsAbs(xdg) {
		out = append(out, filepath.Join(xdg, "git"))
	}
	eachHostGitConfig(home, getenv, func(file string, _ int, entries []gitconfig.Entry) {
		// What it includes, whether or not that reads: a path the session could
		// make readable later.
		out = append(out, gitconfig.IncludePaths(entries, file, home)...)
		for _, e := range entries {
			out = append(out, valuePaths(e.Value, home)...)
		}
	})
	return out
}

// valuePaths are the absolute or ~ paths among the words of a config value.
func valuePaths(value, home string) []string {
	var out []string
	for _, tok := range strings.FieldsFunc(value, func(r rune) bool {
		return r == ' ' || r == '\t' || strings.ContainsRune(";|&()<>`'\"=,", r)
	}) {
		tok = strings.TrimPrefix(tok, "!")
		if p, ok := gitconfig.ExpandPath(tok, home); ok && filepath.IsAbs(p) && p != "/" && filepath.Clean(p) != home {
			out = append(out, p)
		}
	}
	return out
}

// checkKeptGit refuses a kept path that holds, or lies in, one of gitHostPaths
// (through a symlink too: a ~/.gitconfig linked into a kept dotfiles directory).
func checkKeptGit(p *Policy, opts Options) error {
	if len(p.Keep) == 0 {
		return nil
	}
	for _, gp := range gitHostPaths(p.Home, operatorEnv(opts)) {
		for _, form := range canonicalForms(filepath.Clean(gp)) {
			for _, k := range p.Keep {
				if hostpath.Within(form, k.Path) || hostpath.Within(k.Path, form) {
					return &Error{What: k.From, Path: k.Path, Reason: "holds " + quote(gp) +
						", which the operator's Git reads for every repository (its global config, a file it includes, or a path its config names: hooks, templates, a program) and can run programs from; agentbox does not keep it"}
				}
			}
		}
	}
	return nil
}
