package audit

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/gitguard/gitconfig"
)

// The Git state files below a gitdir, beyond config, hooks and todo lists, from which
// Git takes the name of a program to run later (read from Git's source, sequencer.c,
// merge.c, builtin/rebase.c, remote.c, transport.c):
//
//   - rebase-merge/strategy: `git rebase --continue` picks the next commit with
//     try_merge_command, which runs `git merge-<strategy>`; a name with a slash is
//     run as a path relative to the operator's working directory, so a program the
//     sandbox put in the working tree (a directory named "git-merge-..") runs with no
//     PATH trick at all;
//   - sequencer/opts: the same for `git cherry-pick --continue` and `git revert
//     --continue`, through options.strategy (a config-format file);
//   - remotes/NAME and branches/NAME, the legacy remote files: a URL of the form
//     HELPER::ADDRESS makes `git fetch NAME` run git-remote-HELPER.
//
// Checked and not covered, since Git runs nothing they name: rebase-merge/
// strategy_opts (options to the strategy), gpg_sign_opt (a key id: the program is
// gpg.program, in config), done and git-rebase-todo.backup (never executed),
// rebase-apply/* (git am's state: apply options, no program), BISECT_LOG (replayed
// only when the operator names it, and bisect replay runs no "run" line),
// BISECT_TERMS, FETCH_HEAD, MERGE_*, rr-cache, info/exclude; info/attributes only
// selects drivers whose commands live in config, as a working-tree .gitattributes
// can; objects/info/alternates redirects object lookup, runs nothing.

// KindState is a Git state file that names a program Git runs when an operation
// continues.
const KindState ItemKind = "sequencer state"

// KindRemoteFile is a legacy remote file (remotes/, branches/).
const KindRemoteFile ItemKind = "legacy remote"

// builtinStrategy says whether name is a merge strategy Git implements itself or
// installs.
func builtinStrategy(name string) bool {
	switch name {
	case "ort", "recursive", "resolve", "octopus", "ours", "subtree":
		return true
	}
	return false
}

// strategyDanger says why Git running merge strategy name is a danger, or "".
func strategyDanger(name, when string) string {
	name = strings.TrimSpace(name)
	switch {
	case name == "" || builtinStrategy(name):
		return ""
	case strings.ContainsRune(name, '/'):
		return fmt.Sprintf("merge strategy %q: %s runs git-merge-%s, a path in the working tree", oneLine(name), when, oneLine(name))
	}
	return fmt.Sprintf("merge strategy %q: %s runs git-merge-%s from PATH", oneLine(name), when, oneLine(name))
}

// stateFiles audits the sequencer state and legacy remote files of gitdir dir.
func (s *scanner) stateFiles(dir string) {
	if it, data, ok := s.file(filepath.Join(dir, "rebase-merge", "strategy"), KindState, gitconfig.MaxFileSize); ok && data != nil {
		line, _, _ := strings.Cut(string(data), "\n")
		if d := strategyDanger(line, "git rebase --continue"); d != "" {
			it.Dangers = appendNew(it.Dangers, d)
		}
	}
	if it, data, ok := s.file(filepath.Join(dir, "sequencer", "opts"), KindState, gitconfig.MaxFileSize); ok && data != nil {
		entries, err := gitconfig.Parse(bytes.NewReader(data))
		if err != nil {
			it.Dangers = appendNew(it.Dangers, fmt.Sprintf("cannot be parsed, so cannot be checked (%v)", err))
		}
		for _, e := range entries {
			if e.Section == "options" && e.Key == "strategy" {
				if d := strategyDanger(e.Value, "git cherry-pick --continue"); d != "" {
					s.danger(it, d)
				}
			}
		}
	}
	for _, sub := range []string{"remotes", "branches"} {
		for _, e := range s.listIfDir(filepath.Join(dir, sub)) {
			if e.IsDir() {
				continue
			}
			p := filepath.Join(dir, sub, e.Name())
			it, data, ok := s.file(p, KindRemoteFile, gitconfig.MaxFileSize)
			if !ok || data == nil {
				continue
			}
			for _, line := range strings.Split(string(data), "\n") {
				url := strings.TrimSpace(line)
				if sub == "remotes" {
					v, found := strings.CutPrefix(url, "URL:")
					if !found {
						continue
					}
					url = strings.TrimSpace(v)
				}
				if h := remoteHelper(url); h != "" {
					s.danger(it, fmt.Sprintf("URL %q makes git fetch run the remote helper git-remote-%s", oneLine(url), oneLine(h)))
				}
			}
		}
	}
}

// remoteHelper returns HELPER when url has the form HELPER::ADDRESS, as Git's
// transport_get reads it (a URL scheme: a letter, then letters, digits, + . -).
func remoteHelper(url string) string {
	i := 0
	for i < len(url) {
		c := url[i]
		alpha := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !(alpha || i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '.' || c == '-')) {
			break
		}
		i++
	}
	if i > 0 && strings.HasPrefix(url[i:], "::") {
		return url[:i]
	}
	return ""
}
