package audit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/gitguard/gitconfig"
)

// TestScanStateFiles: sequencer state and legacy remote files that name a program
// are dangers; the built-in strategies and plain URLs are not.
func TestScanStateFiles(t *testing.T) {
	repo, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	git := filepath.Join(repo, ".git")
	files := map[string]string{
		"HEAD":                              "ref: refs/heads/main\n",
		"rebase-merge/strategy":             "../planted\n",
		"sequencer/opts":                    "[options]\n\tstrategy = evil\n\tstrategy-option = theirs\n",
		"remotes/evil":                      "URL: foo::bar\nPull: refs/heads/*:refs/remotes/evil/*\n",
		"remotes/plain":                     "URL: https://example.invalid/x.git\n",
		"branches/evil2":                    "hg+x::host/repo#main\n",
		"branches/plain":                    "/srv/git/x.git#main\n",
		"worktrees/w/HEAD":                  "ref: refs/heads/w\n",
		"worktrees/w/commondir":             "../..\n",
		"worktrees/w/gitdir":                filepath.Join(repo, "w/.git") + "\n",
		"worktrees/w/rebase-merge/strategy": "ort\n",
	}
	for rel, content := range files {
		p := filepath.Join(git, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"objects", "refs"} {
		if err := os.MkdirAll(filepath.Join(git, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Scan(repo, ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"rebase-merge/strategy":             "a path in the working tree",
		"sequencer/opts":                    "git-merge-evil from PATH",
		"remotes/evil":                      "git-remote-foo",
		"branches/evil2":                    "git-remote-hg+x",
		"remotes/plain":                     "",
		"branches/plain":                    "",
		"worktrees/w/rebase-merge/strategy": "",
	}
	for rel, w := range want {
		it := s.Items[filepath.Join(git, rel)]
		if it == nil {
			t.Errorf("%s: not in the exec surface", rel)
			continue
		}
		got := strings.Join(it.Dangers, "; ")
		if w == "" && got != "" || w != "" && !strings.Contains(got, w) {
			t.Errorf("%s: dangers %q, want %q", rel, got, w)
		}
	}
}

// TestDangerProgramKeys: the config keys, beyond the first list, from which Git
// takes a program name (read from Git's source).
func TestDangerProgramKeys(t *testing.T) {
	for _, c := range []struct {
		e    gitconfig.Entry
		want bool
	}{
		{gitconfig.Entry{Section: "remote", Subsection: "o", Key: "vcs", Value: "../x"}, true},
		{gitconfig.Entry{Section: "remote", Subsection: "o", Key: "url", Value: "hg::https://h/r"}, true},
		{gitconfig.Entry{Section: "remote", Subsection: "o", Key: "url", Value: "https://h/r"}, false},
		{gitconfig.Entry{Section: "remote", Subsection: "o", Key: "url", Value: "/srv/a::b"}, false},
		{gitconfig.Entry{Section: "url", Subsection: "evil::", Key: "insteadof", Value: "https://"}, true},
		{gitconfig.Entry{Section: "url", Subsection: "https://mirror/", Key: "insteadof", Value: "https://"}, false},
		{gitconfig.Entry{Section: "pull", Key: "twohead", Value: "ort"}, false},
		{gitconfig.Entry{Section: "pull", Key: "octopus", Value: "octopus evil"}, true},
		{gitconfig.Entry{Section: "gc", Key: "recentobjectshook", Value: "x"}, true},
		{gitconfig.Entry{Section: "tar", Subsection: "tar.xz", Key: "command", Value: "xz -c"}, true},
	} {
		if got := Danger(c.e) != ""; got != c.want {
			t.Errorf("Danger(%s = %q) = %q, want dangerous %v", c.e.Name(), c.e.Value, Danger(c.e), c.want)
		}
	}
}
