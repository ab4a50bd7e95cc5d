package audit

import (
	"fmt"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/gitguard/gitconfig"
)

// Danger says why a config entry can make Git run a program, or "" when it cannot:
// the first row of dangerRules that names the entry's key and takes the entry, else
// the first such row for any key of its section ("*"). The table is scanned rather than indexed: a map of it
// would be built by every start of agentbox, and a scan of its few dozen rows costs
// an entry less than the key a map lookup would join.
func Danger(e gitconfig.Entry) string {
	value := strings.TrimSpace(e.Value)
	named := false
	for _, key := range [2]string{e.Key, "*"} {
		for i := range dangerRules {
			r := &dangerRules[i]
			if r.Section != e.Section || !slices.Contains(r.Keys, key) {
				continue
			}
			named = true
			if why := r.danger(e, value); why != "" {
				return why
			}
		}
	}
	if !named {
		return unlistedDanger(e, value)
	}
	return ""
}

// execWords are the words of a key's name that say it names a program. Git's own
// such keys are in dangerRules; tools that read Git's config run programs from keys
// no table of Git's holds (git-annex's annex.*-command, git-secrets'
// secrets.providers, git-flow's gitflow.path.hooks), and a new Git version adds
// more (hook.NAME.command in 2.54). A tool's options for a program it runs are one
// (git-annex's remote.NAME.annex-ssh-options = -oProxyCommand=PROGRAM, its
// annex-rsync-transport and annex.web-options), singular as well
// (sendemail.smtpServerOption, each an argument of the sendmail program: msmtp's
// --passwordeval=PROGRAM), or called args (gcrypt.gpg-args, Git LFS's
// lfs.customtransfer.NAME.args).
var execWords = []string{"command", "cmd", "program", "hook", "exec", "helper", "shell", "editor",
	"pager", "browser", "script", "provider", "askpass", "option", "args", "transport"}

// unlistedDanger is the rule for an entry no row of dangerRules names, so that a
// key the table does not know fails closed: a value that starts with "!" (a shell
// command, as tig's bindings in [tig "bind"] are), or a key whose name has a word
// of execWords and a value that is neither empty, a boolean nor a number. Git's advice.* keys
// are booleans that only silence hints.
func unlistedDanger(e gitconfig.Entry, value string) string {
	if e.NoValue || value == "" || e.Section == "advice" {
		return ""
	}
	if strings.HasPrefix(value, "!") {
		return "unlisted key whose value is a shell command (!)"
	}
	if e.Section == "push" && e.Key == "pushoption" || e.Section == "remote" && e.Key == "serveroption" {
		// Git's own: strings sent to the remote (git push -o ci.skip, protocol v2's
		// server options), which no program here reads; the word "option" took them
		// for a program's option on every GitLab or Gerrit user's repository.
		return ""
	}
	if isBoolString(value) || strings.Trim(value, "0123456789") == "" {
		return "" // a boolean or a number names no program
	}
	key := strings.NewReplacer("-", "", "_", "").Replace(strings.ToLower(e.Key))
	for _, w := range execWords {
		if strings.Contains(key, w) {
			return "unlisted key that may name a program a tool runs (" + w + ")"
		}
	}
	return ""
}

// A dangerRule is one row of the danger table: an entry of Section with one of Keys
// ("*": any key) can make Git run a program, for the reason Why, when If (if set)
// takes the entry and its trimmed value. Reason, when set, words the reason from the
// entry instead ("": not dangerous after all); Why then says it in general.
type dangerRule struct {
	Section string
	Keys    []string
	Why     string
	When    string // what If takes, in words; "" when If is nil
	If      func(e gitconfig.Entry, value string) bool
	Reason  func(e gitconfig.Entry, value string) string
}

func (r dangerRule) danger(e gitconfig.Entry, value string) string {
	switch {
	case r.If != nil && !r.If(e, value):
		return ""
	case r.Reason != nil:
		return r.Reason(e, value)
	}
	return r.Why
}

// String prints the row as a line of the table.
func (r dangerRule) String() string {
	s := r.Section + "." + strings.Join(r.Keys, "|") + ": " + r.Why
	if r.When != "" {
		s += ", when " + r.When
	}
	return s
}

// dangerRules follow git-config(1): every variable whose value Git runs as a command
// (or hands to the shell), names a program, points Git at other config or hooks, or
// unlocks a transport that runs commands. They err on the side of reporting: a key
// that only runs a program for an explicit command (git send-email, git mergetool)
// still counts, since the operator may type that command.
//
// core.worktree is not in the table: it runs nothing, and whether it is dangerous
// depends on where it points, which only the audit knows (see auditor.config).
var dangerRules = []dangerRule{
	// core.fsmonitor true/false select Git's built-in daemon or nothing; anything
	// else is a hook command Git runs on every status.
	{Section: "core", Keys: []string{"fsmonitor"}, Why: "runs a program on every git status",
		When: "not a boolean", If: notBool},
	{Section: "core", Keys: []string{"hookspath"}, Why: "moves Git's hooks directory"},
	// An empty value makes Git fall back to its default.
	{Section: "core", Keys: []string{"sshcommand", "pager", "editor", "askpass", "gitproxy", "alternaterefscommand"},
		Why: "names a program Git runs", When: "not empty", If: notEmpty},
	{Section: "sequence", Keys: []string{"editor"}, Why: "names a program Git runs"},
	// An empty value only resets the list of helpers.
	{Section: "credential", Keys: []string{"helper"}, Why: "names a credential helper Git runs",
		When: "not empty", If: notEmpty},
	// Git Credential Manager picks its provider by name; only a name it does not
	// know counts (the unlisted rule took the key's "provider" for a program).
	{Section: "credential", Keys: []string{"provider"}, Why: "names an unknown credential provider for Git Credential Manager",
		When: "the value is not one of its provider names", If: func(_ gitconfig.Entry, value string) bool {
			switch strings.ToLower(value) {
			case "auto", "generic", "github", "gitlab", "bitbucket", "azure-repos":
				return false
			}
			return true
		}},
	{Section: "gpg", Keys: []string{"program", "defaultkeycommand"}, Why: "names a program Git runs to sign or verify"},
	{Section: "diff", Keys: []string{"textconv", "command"}, Why: "names a diff program Git runs"},
	{Section: "diff", Keys: []string{"external"}, Why: "names a diff program Git runs",
		When: "without a subsection", If: func(e gitconfig.Entry, _ string) bool { return e.Subsection == "" }},
	{Section: "merge", Keys: []string{"driver"}, Why: "names a merge driver Git runs",
		When: "in a subsection", If: func(e gitconfig.Entry, _ string) bool { return e.Subsection != "" }},
	{Section: "filter", Keys: []string{"clean", "smudge", "process"}, Why: "names a filter Git runs on checkout, add or status"},
	// An alias is a Git command line: a shell command (!), options ahead of its
	// command (-c core.fsmonitor=PROGRAM status) or a command's own options
	// (ls-remote --upload-pack=PROGRAM) run a program when the operator uses it.
	{Section: "alias", Keys: []string{"*"}, Why: "alias runs a shell command or passes Git options that can name a program",
		When: "it is no plain command line (audit_alias.go)", If: aliasNotPlain,
		Reason: func(_ gitconfig.Entry, value string) string {
			if bang(gitconfig.Entry{}, value) {
				return "alias runs a shell command"
			}
			return "alias is no plain Git command line: its options or command can name a program Git runs (such as -c core.fsmonitor=PROGRAM or --upload-pack=PROGRAM)"
		}},
	{Section: "include", Keys: []string{"*"}, Why: "makes Git read another config file",
		When: "an include (path)", If: func(e gitconfig.Entry, _ string) bool { return gitconfig.IsInclude(e) }},
	{Section: "includeif", Keys: []string{"*"}, Why: "makes Git read another config file",
		When: "an include (path)", If: func(e gitconfig.Entry, _ string) bool { return gitconfig.IsInclude(e) }},
	{Section: "uploadpack", Keys: []string{"packobjectshook"}, Why: "names a program Git runs on upload-pack"},
	{Section: "protocol", Keys: []string{"allow"}, Why: "changes which transports (ext:: runs commands) Git allows"},
	{Section: "remote", Keys: []string{"uploadpack", "receivepack"}, Why: "names the program Git runs for fetch or push"},
	{Section: "remote", Keys: []string{"vcs"}, Why: "names the remote helper Git runs for fetch or push",
		When: "not empty", If: notEmpty, Reason: func(_ gitconfig.Entry, value string) string {
			return "names the remote helper (git-remote-" + oneLine(value) + ") Git runs for fetch or push"
		}},
	{Section: "remote", Keys: []string{"url", "pushurl"}, Why: "names the remote helper Git runs for fetch or push",
		When: "a HELPER::ADDRESS URL", Reason: func(_ gitconfig.Entry, value string) string {
			if h := remoteHelper(value); h != "" {
				return "names the remote helper git-remote-" + h + " Git runs for fetch or push"
			}
			return ""
		}},
	{Section: "submodule", Keys: []string{"update"}, Why: "submodule update runs a shell command",
		When: "the value starts with !", If: bang},
	// pager.<cmd> is a boolean or a pager command.
	{Section: "pager", Keys: []string{"*"}, Why: "names a pager Git runs", When: "not a boolean", If: notBool},
	{Section: "interactive", Keys: []string{"difffilter"}, Why: "names a filter Git runs on git add -p"},
	{Section: "trailer", Keys: []string{"command", "cmd"}, Why: "names a command Git runs to make trailers"},
	{Section: "mergetool", Keys: []string{"cmd", "path"}, Why: "names a program git mergetool runs"},
	{Section: "difftool", Keys: []string{"cmd", "path"}, Why: "names a program git difftool runs"},
	{Section: "man", Keys: []string{"cmd", "path"}, Why: "names a program git help runs"},
	{Section: "browser", Keys: []string{"cmd", "path"}, Why: "names a program git help runs"},
	{Section: "web", Keys: []string{"browser"}, Why: "names a program git help runs"},
	{Section: "sendemail", Keys: []string{"tocmd", "cccmd", "sendmailcmd"}, Why: "names a program git send-email runs"},
	{Section: "sendemail", Keys: []string{"smtpserver"}, Why: "names a program git send-email runs",
		When: "an absolute path", If: func(_ gitconfig.Entry, value string) bool { return strings.HasPrefix(value, "/") }},
	{Section: "imap", Keys: []string{"tunnel"}, Why: "names a command git imap-send runs"},
	{Section: "instaweb", Keys: []string{"httpd", "browser"}, Why: "names a program git instaweb runs"},
	// git instaweb's Apache loads its modules (shared objects) from modulePath.
	{Section: "instaweb", Keys: []string{"modulepath"}, Why: "names the directory git instaweb's Apache loads modules (code) from"},
	{Section: "guitool", Keys: []string{"cmd"}, Why: "names a command git gui runs"},
	{Section: "init", Keys: []string{"templatedir"}, Why: "copies its hooks into every repository Git creates"},
	// pull.twohead and pull.octopus name the strategies git merge and git pull use;
	// each is run as git-merge-NAME.
	{Section: "pull", Keys: []string{"twohead", "octopus"}, Why: "names a merge strategy git merge runs",
		When: "a strategy Git does not build in", Reason: func(_ gitconfig.Entry, value string) string {
			for _, name := range strings.Fields(value) {
				if d := strategyDanger(name, "git merge"); d != "" {
					return d
				}
			}
			return ""
		}},
	{Section: "gc", Keys: []string{"recentobjectshook"}, Why: "names a program git gc runs"},
	{Section: "tar", Keys: []string{"command"}, Why: "names a compressor git archive runs"},
	// url.BASE.insteadOf rewrites matching URLs to BASE, which may name a remote
	// helper (HELPER::ADDRESS).
	{Section: "url", Keys: []string{"insteadof", "pushinsteadof"}, Why: "rewrites URLs to a remote helper",
		When: "the subsection is a HELPER::ADDRESS URL", Reason: func(e gitconfig.Entry, _ string) string {
			if h := remoteHelper(e.Subsection); h != "" {
				return "rewrites URLs to the remote helper git-remote-" + h
			}
			return ""
		}},
	// Git 2.54's configured hooks: hook.NAME.command runs on the events
	// hook.NAME.event names; every key of the section counts, since one (event,
	// enabled) turns a hook defined elsewhere on.
	{Section: "hook", Keys: []string{"*"}, Why: "configures a hook Git runs"},
	// With http.saveCookies, Git (libcurl) rewrites the cookie file after each
	// request, whatever it held: a ~/.bashrc named there is replaced by the
	// server's cookies.
	{Section: "http", Keys: []string{"cookiefile"}, Why: "names a file Git writes the server's cookies to"},
	// git svn takes each of its options from svn.OPTION.
	{Section: "svn", Keys: []string{"authorsprog"}, Why: "names a program git svn runs"},
	// tig reads Git's config: a binding's action after its key runs a command when
	// it starts with !, @, ? or < ([tig "bind"] generic = G !PROGRAM), and
	// tig.diff-highlight names the program diffs are piped through. Other tig keys
	// keep the rule for keys no row names.
	{Section: "tig", Keys: []string{"*"}, Why: "tig runs a binding's command or the program a key names",
		When: "a binding whose action is no tig action, diff-highlight not a boolean, or unlistedDanger", Reason: tigDanger},
	// Git LFS reads the same config: custom transfer agents and extensions are
	// programs it runs on fetch, push and checkout.
	{Section: "lfs", Keys: []string{"path", "clean", "smudge"}, Why: "names a program Git LFS runs"},
}

func notEmpty(_ gitconfig.Entry, value string) bool { return value != "" }

func notBool(e gitconfig.Entry, value string) bool { return !e.NoValue && !isBoolString(value) }

func bang(_ gitconfig.Entry, value string) bool { return strings.HasPrefix(value, "!") }

// tigDanger words the tig row (dangerRules) for e.
func tigDanger(e gitconfig.Entry, value string) string {
	switch {
	case e.Subsection == "bind":
		// tig splits a binding at any white space, as Git's value may hold a tab
		// (quoted, or \t); the action is its second word.
		if words := strings.Fields(value); len(words) > 1 && !plainCommandName(words[1][:1]) {
			return "tig runs this binding's action as a command"
		}
		return ""
	case e.Subsection == "" && e.Key == "diff-highlight" && notBool(e, value):
		return "names a program tig pipes diffs through"
	}
	return unlistedDanger(e, value)
}

// isBoolString reports whether Git reads v as a boolean (an empty value is false).
func isBoolString(v string) bool {
	switch strings.ToLower(v) {
	case "", "true", "false", "yes", "no", "on", "off", "1", "0":
		return true
	}
	return false
}

// describe renders a dangerous entry for a report line, on one line and bounded.
func describe(e gitconfig.Entry, why string) string {
	if e.NoValue {
		return fmt.Sprintf("%s (%s)", e.Name(), why)
	}
	v := e.Value
	if len(v) > 120 {
		v = v[:120] + "…"
	}
	return fmt.Sprintf("%s = %q (%s)", e.Name(), v, why)
}
