package audit

import (
	"strings"

	"github.com/agentbox/agentbox/gitguard/gitconfig"
)

// aliasSafeCommands are the Git commands a multi-word alias may run without
// counting: none takes a program, a shell command or a file to write from its
// words (config, submodule foreach, bisect run, worktree add, archive -o and
// the transport commands do), another repository to write (push) or to copy in,
// where a later session reads it (fetch /home/u/private, pull), or a merge
// strategy, which names a program (merge, rebase, pull, cherry-pick and revert
// take -s); so they are not here.
var aliasSafeCommands = map[string]bool{
	"add": true, "blame": true, "branch": true, "checkout": true, "clean": true,
	"commit": true, "describe": true, "diff": true, "grep": true,
	"log": true, "ls-files": true, "mv": true, "reflog": true, "reset": true,
	"restore": true, "rev-parse": true, "rm": true, "shortlog": true, "show": true,
	"stash": true, "status": true, "switch": true, "tag": true, "whatchanged": true,
}

// aliasSafeOptions are the options (the part before "=") those commands may carry
// in an alias; any other option counts, since options such as --upload-pack,
// --exec, -x, --extcmd, --open-files-in-pager (-O) and --output name a program or a
// file Git writes.
var aliasSafeOptions = map[string]bool{
	"-a": true, "-A": true, "-b": true, "-c": true, "-d": true, "-D": true, "-f": true,
	"-i": true, "-l": true, "-m": true, "-n": true, "-p": true, "-q": true, "-s": true,
	"-sb": true, "-u": true, "-v": true, "-vv": true, "-w": true, "--": true,
	"--abbrev-commit": true, "--all": true, "--amend": true,
	"--author": true, "--branch": true, "--cached": true, "--color": true,
	"--date": true, "--decorate": true, "--first-parent": true,
	"--format": true, "--graph": true, "--hard": true,
	"--ignored": true, "--list": true, "--max-count": true, "--mixed": true,
	"--name-only": true, "--name-status": true, "--no-color": true, "--no-edit": true,
	"--no-merges": true, "--oneline": true, "--patch": true, "--porcelain": true,
	"--pretty": true, "--quiet": true,
	"--reverse": true, "--short": true, "--since": true,
	"--soft": true, "--staged": true, "--stat": true,
	"--until": true, "--untracked-files": true, "--verbose": true, "--word-diff": true,
}

// aliasNotPlain says whether an alias is no plain Git command line. An alias is
// plain when it is one command name (the words the operator types follow it), or a
// command of aliasSafeCommands with options of aliasSafeOptions and other words,
// unquoted. Everything else counts: a shell command (!), Git options ahead of the
// command (-c core.fsmonitor=PROGRAM), quoting that hides either, and a command
// whose words name a program (ls-remote --upload-pack=PROGRAM, grep -OPROGRAM).
func aliasNotPlain(_ gitconfig.Entry, value string) bool {
	if value == "" {
		return false
	}
	if strings.ContainsAny(value, "\"'\\!") {
		return true
	}
	words := strings.Fields(value)
	if len(words) == 0 || !plainCommandName(words[0]) {
		return true
	}
	if len(words) == 1 {
		return false
	}
	if !aliasSafeCommands[words[0]] {
		return true
	}
	for _, w := range words[1:] {
		if !strings.HasPrefix(w, "-") {
			continue
		}
		name, _, _ := strings.Cut(w, "=")
		if !aliasSafeOptions[name] {
			return true
		}
	}
	return false
}

// plainCommandName: w starts with a letter or digit and holds only the bytes of
// Git's command and alias names.
func plainCommandName(w string) bool {
	for i := 0; i < len(w); i++ {
		c := w[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || c != '-' && c != '_' && c != '.') {
			return false
		}
	}
	return w != ""
}
