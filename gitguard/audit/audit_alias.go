package audit

import (
	"slices"
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
var aliasSafeCommands = []string{
	"add", "blame", "branch", "checkout", "clean",
	"commit", "describe", "diff", "grep",
	"log", "ls-files", "mv", "reflog", "reset",
	"restore", "rev-parse", "rm", "shortlog", "show",
	"stash", "status", "switch", "tag", "whatchanged",
}

// aliasSafeOptions are the options (the part before "=") those commands may carry
// in an alias; any other option counts, since options such as --upload-pack,
// --exec, -x, --extcmd, --open-files-in-pager (-O) and --output name a program or a
// file Git writes.
var aliasSafeOptions = []string{
	"-a", "-A", "-b", "-c", "-d", "-D", "-f",
	"-i", "-l", "-m", "-n", "-p", "-q", "-s",
	"-sb", "-u", "-v", "-vv", "-w", "--",
	"--abbrev-commit", "--all", "--amend",
	"--author", "--branch", "--cached", "--color",
	"--date", "--decorate", "--first-parent",
	"--format", "--graph", "--hard",
	"--ignored", "--list", "--max-count", "--mixed",
	"--name-only", "--name-status", "--no-color", "--no-edit",
	"--no-merges", "--oneline", "--patch", "--porcelain",
	"--pretty", "--quiet",
	"--reverse", "--short", "--since",
	"--soft", "--staged", "--stat",
	"--until", "--untracked-files", "--verbose", "--word-diff",
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
	if !slices.Contains(aliasSafeCommands, words[0]) {
		return true
	}
	for _, w := range words[1:] {
		if !strings.HasPrefix(w, "-") {
			continue
		}
		name, _, _ := strings.Cut(w, "=")
		if !slices.Contains(aliasSafeOptions, name) {
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
