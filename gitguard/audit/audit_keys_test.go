package audit

import (
	"strings"
	"testing"

	"github.com/agentbox/agentbox/gitguard/gitconfig"
)

// dangerExample is, for one section.key of the danger table, an entry the row must
// report (hit: value "x" unless set) and, for a row with a condition, one it must
// not (miss). Section and an unset Key come from the row; a "*" row sets Key.
type dangerExample struct {
	hit, miss gitconfig.Entry
}

// ex is a dangerExample whose two entries share a subsection.
func ex(sub, hit, miss string) dangerExample {
	return dangerExample{gitconfig.Entry{Subsection: sub, Value: hit}, gitconfig.Entry{Subsection: sub, Value: miss}}
}

var dangerExamples = map[string]dangerExample{
	"core.fsmonitor":            ex("", "./hook", "true"),
	"core.sshcommand":           ex("", "", ""),
	"core.pager":                ex("", "", ""),
	"core.editor":               ex("", "", ""),
	"core.askpass":              ex("", "", ""),
	"core.gitproxy":             ex("", "", ""),
	"core.alternaterefscommand": ex("", "", ""),
	"credential.helper":         ex("", "", ""),
	"credential.provider":       ex("", "/tmp/x", "github"),
	"diff.external":             {gitconfig.Entry{Value: "x"}, gitconfig.Entry{Subsection: "d", Value: "x"}},
	"merge.driver":              {gitconfig.Entry{Subsection: "m", Value: "x"}, gitconfig.Entry{Value: "x"}},
	"alias.*":                   {gitconfig.Entry{Key: "st", Value: "!sh -c x"}, gitconfig.Entry{Key: "st", Value: "status -s"}},
	"tig.*":                     {gitconfig.Entry{Subsection: "bind", Key: "generic", Value: "G !sh -c x"}, gitconfig.Entry{Subsection: "bind", Key: "generic", Value: "G move-last-line"}},
	"hook.*":                    {gitconfig.Entry{Subsection: "lint", Key: "command", Value: "x"}, gitconfig.Entry{}},
	"include.*":                 {gitconfig.Entry{Key: "path", Value: "other.cfg"}, gitconfig.Entry{Key: "other", Value: "other.cfg"}},
	"includeif.*":               {gitconfig.Entry{Subsection: "gitdir:/x/", Key: "path", Value: "o.cfg"}, gitconfig.Entry{Subsection: "gitdir:/x/", Key: "other", Value: "o.cfg"}},
	"remote.vcs":                ex("o", "../x", ""),
	"remote.url":                ex("o", "hg::https://h/r", "https://h/r"),
	"remote.pushurl":            ex("o", "evil::x", "/srv/a::b"),
	"submodule.update":          ex("s", "!sh", "rebase"),
	"pager.*":                   {gitconfig.Entry{Key: "log", Value: "less -R"}, gitconfig.Entry{Key: "log", NoValue: true}},
	"sendemail.smtpserver":      ex("", "/usr/bin/msmtp", "smtp.example.org"),
	"pull.twohead":              ex("", "evil", "ort"),
	"pull.octopus":              ex("", "octopus evil", "octopus"),
	"url.insteadof":             {gitconfig.Entry{Subsection: "evil::", Value: "https://"}, gitconfig.Entry{Subsection: "https://mirror/", Value: "https://"}},
	"url.pushinsteadof":         {gitconfig.Entry{Subsection: "evil::", Value: "https://"}, gitconfig.Entry{Subsection: "https://mirror/", Value: "https://"}},
}

// entry completes an example's entry for the row's section and key k.
func (r dangerRule) entry(e gitconfig.Entry, k string) gitconfig.Entry {
	e.Section = r.Section
	if e.Key == "" {
		e.Key = k
	}
	return e
}

// TestDangerTableRows checks every row of the danger table, key by key: an entry it
// names is reported (with the row's reason, unless the row words its own), and a row
// with a condition has a harmless example that is not. A row added without an
// example for its condition fails here.
func TestDangerTableRows(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range dangerRules {
		for _, k := range r.Keys {
			id := r.Section + "." + k
			seen[id] = true
			x, ok := dangerExamples[id]
			if k == "*" && x.hit.Key == "" {
				t.Errorf("row %s: no key for the example of %s", r, id)
				continue
			}
			hit := r.entry(x.hit, k)
			if hit.Value == "" && !hit.NoValue {
				hit.Value = "x"
			}
			switch got := Danger(hit); {
			case got == "":
				t.Errorf("row %s: %s = %q not reported", r, hit.Name(), hit.Value)
			case r.Reason == nil && got != r.Why:
				t.Errorf("row %s: %s = %q reported as %q", r, hit.Name(), hit.Value, got)
			}
			if r.If == nil && r.Reason == nil {
				continue
			}
			if !ok {
				t.Errorf("row %s has a condition (%s) but %s has no harmless example", r, r.When, id)
				continue
			}
			miss := r.entry(x.miss, k)
			if got := Danger(miss); got != "" {
				t.Errorf("row %s: harmless %s = %q reported as %q", r, miss.Name(), miss.Value, got)
			}
		}
	}
	for id := range dangerExamples {
		if !seen[id] {
			t.Errorf("example for %s, which no row names", id)
		}
	}
}

// TestDangerTablePrints: each row prints as one line naming its keys, its reason and
// its condition.
func TestDangerTablePrints(t *testing.T) {
	for _, r := range dangerRules {
		s := r.String()
		if strings.Contains(s, "\n") || !strings.HasPrefix(s, r.Section+".") || !strings.Contains(s, r.Why) ||
			(r.When != "") != strings.Contains(s, ", when ") {
			t.Errorf("row prints as %q", s)
		}
		if (r.If != nil || r.Reason != nil) != (r.When != "") {
			t.Errorf("row %s: a condition needs its words in When, and When a condition", s)
		}
	}
}

// TestDangerAliasOptions: an alias is Git's command line, and the options ahead of
// its command (-c, --config-env) can name a program, however they are quoted; one
// that starts with a command name is harmless.
func TestDangerAliasOptions(t *testing.T) {
	for value, want := range map[string]bool{
		`-c core.fsmonitor="touch /tmp/x" status`: true,
		`--config-env=core.pager=P log`:           true,
		`"-c" core.editor=vi commit`:              true,
		`'-c' core.editor=vi commit`:              true,
		`\-c core.editor=vi commit`:               true,
		`-p log`:                                  true,
		`!sh -c x`:                                true,
		`status -s`:                               false,
		`log --oneline -c core.pager=x`:           false,
		`2fa`:                                     false,
		// A plain command whose own options or words name a program or a file.
		`ls-remote --upload-pack=PROGRAM .`:           true,
		`grep --open-files-in-pager=PROGRAM -e x`:     true,
		`grep -OPROGRAM -e x`:                         true,
		`archive --remote=. --exec=PROGRAM HEAD`:      true,
		`rebase -x PROGRAM HEAD~1`:                    true,
		`difftool -y --extcmd=PROGRAM`:                true,
		`log --output=/home/u/.bashrc --format=%s`:    true,
		`config core.pager PROGRAM`:                   true,
		`submodule foreach PROGRAM`:                   true,
		`worktree add /home/u/.config/autostart main`: true,
		`log --graph --pretty=format:"%h %s"`:         true,
		// The operator's ordinary aliases.
		`checkout`:                               false,
		`status -sb`:                             false,
		`log --graph --oneline --decorate --all`: false,
		`log --pretty=format:%h%x09%s --date=short`: false,
		`reset HEAD --`:                               false,
		`commit --amend --no-edit`:                    false,
		`merge -s ../x/evil main`:                     true,
		`push /home/u/other-repo HEAD:refs/heads/x`:   true,
		`fetch /home/u/private refs/heads/*:refs/x/*`: true,
		`lg`: false,
	} {
		e := gitconfig.Entry{Section: "alias", Key: "st", Value: value}
		if got := Danger(e) != ""; got != want {
			t.Errorf("alias.st = %s: reported %v, want %v", value, got, want)
		}
	}
}

// TestDangerUnlisted: a key no row of the table names fails closed when it is shaped
// like a program — tools that read Git's config run programs from their own keys —
// and Git's ordinary keys stay harmless.
func TestDangerUnlisted(t *testing.T) {
	for _, c := range []struct {
		sec, sub, key, value string
		want                 bool
	}{
		{"annex", "", "freezecontent-command", "chmod -w %path", true},
		{"remote", "o", "annex-cost-command", "x", true},
		{"secrets", "", "providers", "cat /x", true},
		{"gitflow", "path", "hooks", "/repo/.hooks", true},
		{"tig", "bind", "generic", "!sh -c x", true},
		{"tig", "bind", "generic", "G !sh -c x", true},
		{"tig", "bind", "main", "<Ctrl-g> @x", true},
		{"tig", "bind", "status", "C ?<x", true},
		{"tig", "bind", "generic", "G move-last-line", false},
		{"tig", "bind", "generic", "G\t!x.sh", true},
		{"tig", "bind", "generic", "G\n@x", true},
		{"tig", "", "diff-highlight", "/repo/x", true},
		{"tig", "", "diff-highlight", "true", false},
		{"tig", "", "main-options", "--output=/x", true},
		{"tig", "", "line-graphics", "utf-8", false},
		{"remote", "o", "annex-ssh-options", "-oProxyCommand=x", true},
		{"remote", "o", "annex-rsync-transport", "x -p 22", true},
		{"remote", "o", "annex-rsync-options", "-e x", true},
		{"annex", "", "web-options", "--config /x", true},
		{"sendemail", "", "smtpserveroption", "--passwordeval=/tmp/x", true},
		{"sendemail", "work", "smtpserveroption", "-C/tmp/x", true},
		{"gcrypt", "", "gpg-args", "--options /tmp/x", true},
		{"lfs", "customtransfer.t", "args", "--exec /tmp/x", true},
		{"instaweb", "", "modulepath", "/tmp/mods", true},
		{"instaweb", "", "port", "1234", false},
		{"receive", "", "advertisepushoptions", "true", false},
		{"push", "", "pushoption", "ci.skip", false},
		{"remote", "origin", "serveroption", "foo=bar", false},
		{"push", "", "pushoption", "!x", true},
		{"newtool", "", "onsave", "!x", true},
		{"user", "", "name", "x", false},
		{"remote", "o", "fetch", "+refs/heads/*:refs/remotes/o/*", false},
		{"branch", "main", "merge", "refs/heads/main", false},
		{"core", "", "repositoryformatversion", "0", false},
		{"submodule", "s", "active", "true", false},
		{"http", "", "sslcapath", "/etc/ssl/certs", false},
		{"advice", "", "ignoredhook", "false", false},
		{"core", "", "fsmonitorhookversion", "2", false},
		{"newtool", "", "usehooks", "true", false},
	} {
		e := gitconfig.Entry{Section: c.sec, Subsection: c.sub, Key: c.key, Value: c.value}
		if got := Danger(e) != ""; got != c.want {
			t.Errorf("%s = %q: reported %v (%q), want %v", e.Name(), c.value, got, Danger(e), c.want)
		}
	}
}

// TestDangerParsedLikeGit: an entry is judged on the value Git reads, whatever
// white space separates its words in the file: a lone carriage return (a space to
// Git) and a quoted tab or a \t escape (kept by Git, a separator to tig) hid tig's
// shell binding from the audit.
func TestDangerParsedLikeGit(t *testing.T) {
	for _, c := range []string{
		"[tig \"bind\"]\n\tgeneric = G\r!/tmp/x.sh\n",
		"[tig \"bind\"]\n\tgeneric = \"G\t!/tmp/x.sh\"\n",
		"[tig \"bind\"]\n\tgeneric = G\\t!/tmp/x.sh\n",
	} {
		entries, err := gitconfig.Parse(strings.NewReader(c))
		if err != nil || len(entries) != 1 {
			t.Fatalf("%q: %v %v", c, entries, err)
		}
		if Danger(entries[0]) == "" {
			t.Errorf("%q (value %q) not reported", c, entries[0].Value)
		}
	}
}
