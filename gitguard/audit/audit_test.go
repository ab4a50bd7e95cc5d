package audit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/gitguard"
	"github.com/agentbox/agentbox/gitguard/gitconfig"
	"github.com/agentbox/agentbox/internal/testkit/gitfixture"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// fixture is gitfixture's repository, with the audit's scan of it.
type fixture struct{ *gitfixture.Fixture }

func newFixture(t *testing.T) *fixture { return &fixture{gitfixture.New(t)} }

func (f *fixture) scan() *Surface {
	f.T.Helper()
	s, err := Scan(f.Repo, ScanOptions{Home: f.Home, HostConfigs: []string{filepath.Join(f.Home, ".gitconfig")}})
	if err != nil {
		f.T.Fatal(err)
	}
	return s
}

func findingAt(fs []Finding, path string) *Finding {
	for i := range fs {
		if fs[i].Path == path {
			return &fs[i]
		}
	}
	return nil
}

const payload = "[core]\n\tfsmonitor = \"touch /nonexistent/PWNED; false\"\n"

// TestAuditLocations plants a payload in each place Git reads config or hooks from,
// after a baseline, and checks that the audit reports it, moves exactly that file
// aside, and is clean afterwards.
func TestAuditLocations(t *testing.T) {
	cases := []struct {
		name  string
		plant func(f *fixture) string // returns the path that must be reported
		why   string                  // substring of the reason
		// sessionOnly: harmless as such, reported only as a change (Item.Watch), so
		// the on-demand audit does not report it.
		sessionOnly bool
	}{
		{"commondir of the repository", func(f *fixture) string {
			f.GitdirAt("elsewhere")
			return f.Write(".git/commondir", "../elsewhere\n", 0o644)
		}, "makes Git read config and hooks from", false},
		{"config of a commondir target", func(f *fixture) string {
			d := f.GitdirAt("elsewhere")
			f.Write(".git/commondir", "../elsewhere\n", 0o644)
			return f.Write(filepath.Join(d, "config"), payload, 0o644)
		}, "core.fsmonitor", false},
		{"planted submodule gitdir via .git file", func(f *fixture) string {
			d := f.GitdirAt("sneaky")
			f.Write("sub/.git", "gitdir: ../sneaky\n", 0o644)
			return f.Write(filepath.Join(d, "config"), payload, 0o644)
		}, "core.fsmonitor", false},
		{"planted submodule gitdir via absolute .git file", func(f *fixture) string {
			d := filepath.Join(f.Repo, "deep/x/y")
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			f.Write("sub/.git", "gitdir: "+d+"\n", 0o644)
			return f.Write(filepath.Join(d, "config"), payload, 0o644)
		}, "core.fsmonitor", false},
		{"modules gitdir config", func(f *fixture) string {
			f.GitdirAt(".git/modules/m")
			return f.Write(".git/modules/m/config", payload, 0o644)
		}, "core.fsmonitor", false},
		{"modules gitdir with a slashed name under another", func(f *fixture) string {
			f.GitdirAt(".git/modules/a")
			f.GitdirAt(".git/modules/a/b")
			return f.Write(".git/modules/a/b/config", payload, 0o644)
		}, "core.fsmonitor", false},
		{"nested modules of a module", func(f *fixture) string {
			f.GitdirAt(".git/modules/a")
			f.GitdirAt(".git/modules/a/modules/b")
			return f.Write(".git/modules/a/modules/b/config", payload, 0o644)
		}, "core.fsmonitor", false},
		{"modules gitdir commondir", func(f *fixture) string {
			f.GitdirAt(".git/modules/m")
			return f.Write(".git/modules/m/commondir", "../../../x\n", 0o644)
		}, "makes Git read config", false},
		{"modules gitdir hook", func(f *fixture) string {
			f.GitdirAt(".git/modules/m")
			return f.Write(".git/modules/m/hooks/post-checkout", "#!/bin/sh\ntouch /nonexistent\n", 0o755)
		}, "executable hook post-checkout", false},
		{"nested .git directory", func(f *fixture) string {
			f.GitdirAt("vendor/lib/.git")
			return f.Write("vendor/lib/.git/config", payload, 0o644)
		}, "core.fsmonitor", false},
		{"nested .git directory hook", func(f *fixture) string {
			f.GitdirAt("lib/.git")
			return f.Write("lib/.git/hooks/pre-commit", "#!/bin/sh\n", 0o700)
		}, "executable hook pre-commit", false},
		{"bare repository in the working tree", func(f *fixture) string {
			f.GitdirAt("docs/bare")
			return f.Write("docs/bare/config", payload, 0o644)
		}, "core.fsmonitor", false},
		{"config.worktree", func(f *fixture) string {
			return f.Write(".git/config.worktree", payload, 0o644)
		}, "core.fsmonitor", false},
		{"linked worktree config.worktree", func(f *fixture) string {
			f.Write(".git/worktrees/w/HEAD", "ref: refs/heads/main\n", 0o644)
			f.Write(".git/worktrees/w/commondir", "../..\n", 0o644)
			return f.Write(".git/worktrees/w/config.worktree", payload, 0o644)
		}, "core.fsmonitor", false},
		{"linked worktree commondir pointing elsewhere", func(f *fixture) string {
			f.GitdirAt("elsewhere")
			f.Write(".git/worktrees/w/HEAD", "ref: refs/heads/main\n", 0o644)
			return f.Write(".git/worktrees/w/commondir", "../../../elsewhere\n", 0o644)
		}, "makes Git read config", false},
		{"include target changed", func(f *fixture) string {
			// The include was set before the baseline (see preInclude below).
			return f.Write("conf/extra.inc", payload, 0o644)
		}, "core.fsmonitor", false},
		{"include target of the global config", func(f *fixture) string {
			return f.Write("global.inc", "[alias]\n\tx = !touch /nonexistent\n", 0o644)
		}, "alias runs a shell command", false},
		{"core.hooksPath directory of the user's config", func(f *fixture) string {
			return f.Write(".githooks/pre-commit", "#!/bin/sh\n", 0o755)
		}, "executable hook pre-commit", false},
		{"hook made executable", func(f *fixture) string {
			p := filepath.Join(f.Repo, ".githooks/post-merge")
			if err := os.Chmod(p, 0o755); err != nil {
				t.Fatal(err)
			}
			return p
		}, "executable hook post-merge", false},
		{"symlinked hook", func(f *fixture) string {
			f.GitdirAt(".git/modules/m")
			p := filepath.Join(f.Repo, ".git/modules/m/hooks/pre-push")
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.Symlink("/bin/true", p); err != nil {
				t.Fatal(err)
			}
			return p
		}, "links to /bin/true", false},
		{"symlinked .git", func(f *fixture) string {
			d := f.GitdirAt("hidden")
			f.Write(filepath.Join(d, "config"), payload, 0o644)
			p := filepath.Join(f.Repo, "sub/.git")
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.Symlink("../hidden", p); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(d, "config")
		}, "core.fsmonitor", false},
		{"new symlink in the exec surface", func(f *fixture) string {
			f.GitdirAt("lib/.git")
			p := filepath.Join(f.Repo, "lib/.git/config")
			if err := os.Symlink("/etc/passwd", p); err != nil {
				t.Fatal(err)
			}
			return p
		}, "symlink to /etc/passwd", true},
		{"reflog symlinked out of the repository", func(f *fixture) string {
			return symlinkAt(t, "/etc/passwd", filepath.Join(f.Repo, ".git/logs/HEAD"))
		}, "outside the repository, where Git writes", true},
		{"commit message file symlinked out of the repository", func(f *fixture) string {
			return symlinkAt(t, "/etc/passwd", filepath.Join(f.Repo, ".git/COMMIT_EDITMSG"))
		}, "outside the repository, where Git writes", true},
		{"ref directory symlinked out of the repository", func(f *fixture) string {
			return symlinkAt(t, "/usr", filepath.Join(f.Repo, ".git/refs/heads/out"))
		}, "outside the repository, where Git writes", true},
		{"rerere image symlinked out of the repository", func(f *fixture) string {
			return symlinkAt(t, "/etc/passwd", filepath.Join(f.Repo, ".git/rr-cache/0123abcd/preimage"))
		}, "outside the repository, where Git writes", true},
		{"Git LFS object directory symlinked out, levels deep", func(f *fixture) string {
			return symlinkAt(t, "/usr", filepath.Join(f.Repo, ".git/lfs/objects/ab/cd"))
		}, "outside the repository, where Git writes", true},
		{"Git LFS object symlinked out, in a deep temporary directory", func(f *fixture) string {
			return symlinkAt(t, "/etc/passwd", filepath.Join(f.Repo, ".git/lfs/tmp/a/b/c/d/obj"))
		}, "outside the repository, where Git writes", true},
		{"git-annex object directory symlinked out, levels deep", func(f *fixture) string {
			return symlinkAt(t, "/usr", filepath.Join(f.Repo, ".git/annex/objects/f87/4d5"))
		}, "outside the repository, where Git writes", true},
		{"git-annex object symlinked out, in its temporary directory", func(f *fixture) string {
			return symlinkAt(t, "/etc/passwd", filepath.Join(f.Repo, ".git/annex/tmp/SHA256E-s5--abc/obj"))
		}, "outside the repository, where Git writes", true},
		{"object directory symlinked out, dangling", func(f *fixture) string {
			return symlinkAt(t, "/nonexistent/objects", unusedFanout(t, filepath.Join(f.Repo, ".git/objects")))
		}, "outside the repository, where Git writes", true},
		{"new .git file pointing out of the repository", func(f *fixture) string {
			return f.Write("sub/.git", "gitdir: /usr\n", 0o644)
		}, "outside the repository", true},
		{"user's hook in core.hooksPath rewritten", func(f *fixture) string {
			p := filepath.Join(f.Repo, ".githooks/pre-push")
			if err := os.WriteFile(p, []byte("#!/bin/sh\ntouch /nonexistent\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			return p
		}, "changed; executable hook pre-push", false},
		{"user's fsmonitor script in the working tree rewritten", func(f *fixture) string {
			return f.Write("tools/fsmon.sh", "#!/bin/sh\ntouch /nonexistent\n", 0o755)
		}, "program run by core.fsmonitor", true},
		{"user's textconv script in the working tree rewritten", func(f *fixture) string {
			return f.Write("tools/tc.py", "import os\n", 0o644)
		}, "program run by diff.pdf.textconv", true},
		{"script the user's hook runs rewritten", func(f *fixture) string {
			return f.Write("scripts/check.sh", "#!/bin/sh\ntouch /nonexistent\n", 0o755)
		}, "program run by hook pre-push", true},
		{".gitmodules update command", func(f *fixture) string {
			return f.Write(".gitmodules", "[submodule \"s\"]\n\tpath = s\n\turl = ./s\n\tupdate = !touch /nonexistent\n", 0o644)
		}, "submodule update runs a shell command", false},
		{"rebase todo exec line", func(f *fixture) string {
			return f.Write(".git/rebase-merge/git-rebase-todo", "pick 1234 x\nexec touch /nonexistent\n", 0o644)
		}, "when the rebase continues", false},
		{"core.worktree out of the repository", func(f *fixture) string {
			f.GitdirAt(".git/modules/m")
			return f.Write(".git/modules/m/config", "[core]\n\tworktree = /home\n", 0o644)
		}, "outside the repository", false},
		{"core.worktree redirected out through a symlink", func(f *fixture) string {
			// The user's submodule gitdir, unchanged, names ../../../vendored as its
			// working tree (see preInclude); vendored becomes a symlink out.
			if err := os.RemoveAll(filepath.Join(f.Repo, "vendored")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(f.Home, filepath.Join(f.Repo, "vendored")); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(f.Repo, ".git/modules/vendored/config")
		}, "outside the repository", false},
		{".git file's target redirected out through a symlink", func(f *fixture) string {
			// vendored/.git (unchanged) names ../.git/modules/vendored; the
			// directory modules becomes a symlink out of the repository.
			mods := filepath.Join(f.Repo, ".git/modules")
			if err := os.Rename(mods, filepath.Join(f.Repo, ".git/modules-old")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(f.Home, mods); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(f.Repo, "vendored/.git")
		}, "outside the repository", true},
		{"unparseable new config", func(f *fixture) string {
			f.GitdirAt(".git/modules/m")
			return f.Write(".git/modules/m/config", "[core\n", 0o644)
		}, "cannot be parsed", false},
		{"FIFO as a config", func(f *fixture) string {
			f.GitdirAt(".git/modules/m")
			p := filepath.Join(f.Repo, ".git/modules/m/config")
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}, "not a regular file", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			preInclude(f)
			base := f.scan()
			if got := Compare(base, base); len(got) != 0 {
				t.Fatalf("baseline against itself: %v", got)
			}
			want := c.plant(f)
			cur := f.scan()
			fs := Compare(base, cur)
			fd := findingAt(fs, want)
			if fd == nil {
				t.Fatalf("no finding for %s; findings: %v", want, fs)
			}
			if !strings.Contains(fd.String(), c.why) {
				t.Errorf("finding %q does not say %q", fd.String(), c.why)
			}
			if onDemand := findingAt(Compare(nil, cur), want) != nil; onDemand == c.sessionOnly {
				t.Errorf("on-demand audit reports %s: %v, want %v", want, onDemand, !c.sessionOnly)
			}
			Quarantine(fs, "TEST")
			fd = findingAt(fs, want)
			if fd.MoveErr != nil {
				t.Fatalf("quarantine: %v", fd.MoveErr)
			}
			if fd.Moved != want+QuarantineSuffix+"TEST" {
				t.Errorf("moved to %q, want %q", fd.Moved, want+QuarantineSuffix+"TEST")
			}
			if _, err := os.Lstat(fd.Moved); err != nil {
				t.Errorf("quarantined file: %v", err)
			}
			if _, err := os.Lstat(want); !errors.Is(err, fs2ErrNotExist) {
				t.Errorf("%s still there after quarantine (%v)", want, err)
			}
			if left := Compare(base, f.scan()); len(left) != 0 {
				t.Errorf("findings left after quarantine: %v", left)
			}
		})
	}
}

var fs2ErrNotExist = fs.ErrNotExist

// preInclude gives every location fixture the user's own, pre-existing settings that
// some cases build on: an include in the repository config, a global config that
// includes a file inside the repository, core.hooksPath = .githooks holding a
// non-executable and an executable hook, and a fsmonitor and a textconv program in
// the working tree.
func preInclude(f *fixture) {
	f.Write("conf/extra.inc", "[user]\n\tname = me\n", 0o644)
	f.Git(f.Repo, "config", "include.path", "../conf/extra.inc")
	f.Write("global.inc", "[color]\n\tui = auto\n", 0o644)
	f.Write(filepath.Join(f.Home, ".gitconfig"), "[include]\n\tpath = "+filepath.Join(f.Repo, "global.inc")+"\n", 0o644)
	f.Git(f.Repo, "config", "core.hooksPath", ".githooks")
	f.Write(".githooks/post-merge", "#!/bin/sh\n", 0o644)
	f.Write(".githooks/pre-push", "#!/bin/sh\n# runs scripts/not-this.sh\nexec ./scripts/check.sh \"$@\"\n", 0o755)
	f.Write("scripts/check.sh", "#!/bin/sh\nexit 0\n", 0o755)
	f.Write("scripts/not-this.sh", "#!/bin/sh\nexit 0\n", 0o755)
	f.Write("tools/fsmon.sh", "#!/bin/sh\nexit 0\n", 0o755)
	f.Git(f.Repo, "config", "core.fsmonitor", "tools/fsmon.sh")
	f.Write("tools/tc.py", "print()\n", 0o644)
	f.Git(f.Repo, "config", "diff.pdf.textconv", "python3 ./tools/tc.py --flag")
	f.GitdirAt(".git/modules/vendored")
	f.Write(".git/modules/vendored/config", "[core]\n\tworktree = ../../../vendored\n", 0o644)
	f.Write("vendored/.git", "gitdir: ../.git/modules/vendored\n", 0o644)
}

// TestAuditKeys plants each dangerous key in a new submodule gitdir's config.
func TestAuditKeys(t *testing.T) {
	keys := []string{
		"[core]\n\tfsmonitor = ./x",
		"[core]\n\thooksPath = /tmp",
		"[core]\n\tsshCommand = x",
		"[core]\n\tpager = x",
		"[core]\n\teditor = x",
		"[core]\n\taskPass = x",
		"[core]\n\tgitProxy = x",
		"[core]\n\talternateRefsCommand = x",
		"[sequence]\n\teditor = x",
		"[credential]\n\thelper = x",
		"[credential \"https://h\"]\n\thelper = x",
		"[gpg]\n\tprogram = x",
		"[gpg \"ssh\"]\n\tprogram = x",
		"[gpg \"ssh\"]\n\tdefaultKeyCommand = x",
		"[diff \"d\"]\n\ttextconv = x",
		"[diff \"d\"]\n\tcommand = x",
		"[diff]\n\texternal = x",
		"[merge \"m\"]\n\tdriver = x",
		"[filter \"f\"]\n\tclean = x",
		"[filter \"f\"]\n\tsmudge = x",
		"[filter \"f\"]\n\tprocess = x",
		"[alias]\n\tst = !x",
		"[alias]\n\tst = \" !x\"",
		"[include]\n\tpath = x",
		"[includeIf \"gitdir:/\"]\n\tpath = x",
		"[uploadpack]\n\tpackObjectsHook = x",
		"[protocol]\n\tallow = always",
		"[protocol \"ext\"]\n\tallow = always",
		"[remote \"o\"]\n\tuploadpack = x",
		"[remote \"o\"]\n\treceivepack = x",
		"[submodule \"s\"]\n\tupdate = !x",
		"[pager]\n\tlog = x",
		"[interactive]\n\tdiffFilter = x",
		"[trailer \"t\"]\n\tcommand = x",
		"[mergetool \"t\"]\n\tcmd = x",
		"[difftool \"t\"]\n\tpath = x",
		"[browser \"b\"]\n\tcmd = x",
		"[sendemail]\n\ttoCmd = x",
		"[sendemail \"work\"]\n\tsendmailCmd = x",
		"[imap]\n\ttunnel = x",
		"[instaweb]\n\thttpd = x",
		"[guitool \"t\"]\n\tcmd = x",
		"[init]\n\ttemplateDir = x",
		"[lfs \"customtransfer.t\"]\n\tpath = x",
		"[lfs \"extension.e\"]\n\tsmudge = x",
		"[CORE]\n\tFSMONITOR = x",
		"[core]\r\n\tfsmonitor = x\r\n",
		"[core] fsmonitor = x",
		"[core]\n\tfsmonitor = \\\n x",
	}
	// One repository, one submodule gitdir per key, all planted after one baseline.
	f := newFixture(t)
	base := f.scan()
	paths := make([]string, len(keys))
	for i, k := range keys {
		f.GitdirAt(fmt.Sprintf(".git/modules/m%d", i))
		paths[i] = f.Write(fmt.Sprintf(".git/modules/m%d/config", i), k+"\n", 0o644)
	}
	fs := Compare(base, f.scan())
	for i, k := range keys {
		fd := findingAt(fs, paths[i])
		if fd == nil {
			t.Errorf("%q: no finding", k)
			continue
		}
		if strings.Contains(fd.String(), "cannot be parsed") {
			t.Errorf("%q: parsed differently from Git: %s", k, fd)
		}
	}
	if len(fs) != len(keys) {
		t.Errorf("%d findings for %d keys: %v", len(fs), len(keys), fs)
	}
}

// TestDangerHarmless checks values Git does not run.
func TestDangerHarmless(t *testing.T) {
	for _, k := range []string{
		"[core]\n\tfsmonitor = false", "[core]\n\tfsmonitor = true", "[core]\n\tfsmonitor",
		"[core]\n\tpager =", "[credential]\n\thelper =", "[alias]\n\tst = status -s",
		"[pager]\n\tlog = false", "[user]\n\tname = x", "[remote \"o\"]\n\turl = ../x",
		"[submodule \"s\"]\n\tupdate = rebase", "[core]\n\tworktree = ../../../sub",
		"[protocol]\n\tversion = 2", "[diff]\n\tcolorMoved = zebra",
	} {
		entries, err := gitconfig.Parse(strings.NewReader(k))
		if err != nil {
			t.Fatalf("%q: %v", k, err)
		}
		for _, e := range entries {
			if why := Danger(e); why != "" {
				t.Errorf("%q: reported as %q", k, why)
			}
		}
	}
}

// TestAuditLegitimate checks that ordinary work produces no finding: a submodule
// added with git submodule add from a local path, a linked worktree added inside the
// repository, an unchanged fixture repository with the user's own dangerous config,
// the user's own hooks and config edited harmlessly.
func TestAuditLegitimate(t *testing.T) {
	f := newFixture(t)
	// The user's own fixture repository with their pager, made before launch.
	fixture := filepath.Join(f.Repo, "testdata/fixture")
	if err := os.MkdirAll(fixture, 0o755); err != nil {
		t.Fatal(err)
	}
	f.Git(fixture, "init", "-q")
	f.Git(fixture, "config", "core.pager", "less -R")
	f.Write(".git/hooks/pre-commit", "#!/bin/sh\n", 0o755)
	f.Git(f.Repo, "config", "core.editor", "vi")

	// A library to add as a submodule.
	lib := filepath.Join(f.Root, "lib")
	os.Mkdir(lib, 0o755)
	f.Git(lib, "init", "-q", "-b", "main")
	f.Git(lib, "commit", "-q", "--allow-empty", "-m", "lib")

	base := f.scan()
	f.Git(f.Repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", lib, "libs/lib")
	f.Git(f.Repo, "commit", "-q", "-m", "add lib")
	f.Git(f.Repo, "worktree", "add", "-q", "wt", "-b", "side")
	f.Git(fixture, "config", "user.name", "someone") // changed, but no new danger
	f.Write("src/main.go", "package main\n", 0o644)
	if fs := Compare(base, f.scan()); len(fs) != 0 {
		t.Errorf("legitimate work produced findings: %v", fs)
	}

	// On demand, with no baseline, the user's own settings are reported.
	all := Compare(nil, f.scan())
	for _, want := range []string{filepath.Join(fixture, ".git/config"), filepath.Join(f.Repo, ".git/config"), filepath.Join(f.Repo, ".git/hooks/pre-commit")} {
		if findingAt(all, want) == nil {
			t.Errorf("on-demand audit does not report %s: %v", want, all)
		}
	}
}

// TestAuditSymlinkOut checks that a planted symlink out of the repository is not
// followed: a hooks dir and a commondir target leading to a FIFO outside must not
// make the audit block or read there.
func TestAuditSymlinkOut(t *testing.T) {
	f := newFixture(t)
	outside := filepath.Join(f.Root, "outside")
	os.Mkdir(outside, 0o755)
	if err := syscall.Mkfifo(filepath.Join(outside, "config"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.Write(filepath.Join(outside, "pre-commit"), "#!/bin/sh\n", 0o755)
	base := f.scan()
	f.GitdirAt(".git/modules/m")
	os.Symlink(outside, filepath.Join(f.Repo, ".git/modules/m/hooks"))
	os.Symlink(filepath.Join(outside, "config"), filepath.Join(f.Repo, ".git/modules/m/config"))
	done := make(chan []Finding)
	go func() { done <- Compare(base, f.scan()) }()
	var fs []Finding
	select {
	case fs = <-done:
	case <-time.After(time.Minute):
		t.Fatal("audit blocked on a FIFO outside the repository")
	}
	for _, p := range []string{".git/modules/m/hooks", ".git/modules/m/config"} {
		if findingAt(fs, filepath.Join(f.Repo, p)) == nil {
			t.Errorf("no finding for the new symlink %s: %v", p, fs)
		}
	}
	for _, fd := range fs {
		if strings.HasPrefix(fd.Path, outside) {
			t.Errorf("audit reported a path outside the repository: %s", fd)
		}
	}
}

// TestAuditBounds checks that a walk stopped by its bound says so.
func TestAuditBounds(t *testing.T) {
	f := newFixture(t)
	for i := range 50 {
		f.Write(filepath.Join("many", strings.Repeat("d", i%7+1), string(rune('a'+i%26))+"x"), "", 0o644)
	}
	s, err := Scan(f.Repo, ScanOptions{MaxEntries: 10})
	if err != nil {
		t.Fatal(err)
	}
	fs := Compare(s, s)
	if len(fs) == 0 || !strings.Contains(fs[0].String(), "walk stopped") {
		t.Errorf("bounded walk did not report where it stopped: %v", fs)
	}
	s, err = Scan(f.Repo, ScanOptions{MaxDepth: 1})
	if err != nil {
		t.Fatal(err)
	}
	if fs := Compare(nil, s); len(fs) == 0 || !strings.Contains(fs[0].String(), "deeper than") {
		t.Errorf("depth bound not reported: %v", fs)
	}
}

// TestAuditUnreadableDir: a directory (or gitdir, or config) of the user's that the
// scan cannot read as found is read all the same and its mode put back; one it
// still cannot open (past PATH_MAX) is a finding the quarantine moves.
func TestAuditUnreadableDir(t *testing.T) {
	if !testenv.AsTestUser(t) { // root would read what the test makes unreadable
		return
	}
	f := newFixture(t)
	base := f.scan()
	// The user's own: read, with its mode put back.
	d := filepath.Join(f.Repo, "locked")
	f.GitdirAt("locked/sub/.git")
	p := f.Write("locked/sub/.git/config", payload, 0o644)
	modes := map[string]os.FileMode{d: 0o000, filepath.Join(d, "sub/.git"): 0o100, p: 0o000}
	for _, q := range []string{p, filepath.Join(d, "sub/.git"), d} {
		os.Chmod(q, modes[q])
	}
	t.Cleanup(func() { os.Chmod(d, 0o755); os.Chmod(filepath.Join(d, "sub/.git"), 0o755) })
	fs := Compare(base, f.scan())
	if fd := findingAt(fs, p); fd == nil || fd.Kind != KindConfig {
		t.Errorf("plant below an unreadable directory not found: %v", fs)
	}
	for _, q := range []string{d, filepath.Join(d, "sub/.git"), p} {
		if fi, err := os.Lstat(q); err != nil || fi.Mode().Perm() != modes[q] {
			t.Errorf("%s: %v %v after the scan, want mode %o back", q, fi, err, modes[q])
		}
		if q == d {
			os.Chmod(d, 0o755) // to look below it
		}
	}
	// Past PATH_MAX: reported, and moved aside.
	long := strings.Repeat("l", 250)
	fd, err := unix.Open(f.Repo, unix.O_PATH|unix.O_DIRECTORY, 0)
	deep := f.Repo
	for i := 0; err == nil && len(deep) < unix.PathMax+300; i++ {
		if err = unix.Mkdirat(fd, long, 0o755); err == nil {
			var next int
			next, err = unix.Openat(fd, long, unix.O_PATH|unix.O_DIRECTORY, 0)
			unix.Close(fd)
			fd, deep = next, deep+"/"+long
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	fs = Compare(base, f.scan())
	var far *Finding
	for i := range fs {
		if fs[i].Kind == KindUnaudited && strings.HasPrefix(fs[i].Path, f.Repo+"/"+long) {
			far = &fs[i]
		}
	}
	if far == nil {
		t.Fatalf("a directory past PATH_MAX not reported for the quarantine: %v", fs)
	}
	QuarantineTo(fs, "LONG", t.TempDir())
	if far.Moved == "" || far.Unresolved() {
		t.Errorf("not moved: %v", far.MoveErr)
	}
	pfd, err := unix.Open(filepath.Dir(far.Path), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err = unix.Fstatat(pfd, long, &st, unix.AT_SYMLINK_NOFOLLOW); !errors.Is(err, unix.ENOENT) {
		t.Errorf("still there after the quarantine (moved to %.80s…): %.300v", far.Moved, err)
	}
}

// TestQuarantineReadOnlyDir checks that a directory made read-only does not stop the
// quarantine, and that its mode is restored.
func TestQuarantineReadOnlyDir(t *testing.T) {
	if !testenv.AsTestUser(t) { // root renames out of a mode-555 directory anyway
		return
	}
	f := newFixture(t)
	base := f.scan()
	d := f.GitdirAt(".git/modules/m")
	p := f.Write(".git/modules/m/config", payload, 0o644)
	os.Chmod(d, 0o555)
	t.Cleanup(func() { os.Chmod(d, 0o755) })
	fs := Compare(base, f.scan())
	Quarantine(fs, "RO")
	fd := findingAt(fs, p)
	if fd == nil || fd.MoveErr != nil || fd.Moved == "" {
		t.Fatalf("finding %v", fd)
	}
	fi, _ := os.Stat(d)
	if fi.Mode().Perm() != 0o555 {
		t.Errorf("mode of %s is %o after quarantine, want 555", d, fi.Mode().Perm())
	}
	// A second quarantine with the same id does not overwrite the first.
	os.Chmod(d, 0o755)
	f.Write(".git/modules/m/config", payload, 0o644)
	os.Chmod(d, 0o555)
	fs = Compare(base, f.scan())
	Quarantine(fs, "RO")
	if fd := findingAt(fs, p); fd == nil || fd.Moved != p+QuarantineSuffix+"RO-2" {
		t.Errorf("second quarantine: %v", fd)
	}
}

// TestAuditLinkedWorktree audits a linked worktree used as the repository: its gitdir
// and common dir live outside it and may be writable in the sandbox, so they are
// audited through ScanOptions.GitDirs.
func TestAuditLinkedWorktree(t *testing.T) {
	f := newFixture(t)
	wt := filepath.Join(f.Root, "wt")
	f.Git(f.Repo, "worktree", "add", "-q", wt, "-b", "side")
	f.Git(f.Repo, "config", "core.hooksPath", ".githooks")
	dirs := gitguard.OutsideGitDirs(wt)
	wantDirs := []string{filepath.Join(f.Repo, ".git")}
	if strings.Join(dirs, " ") != strings.Join(wantDirs, " ") {
		t.Fatalf("OutsideGitDirs = %v, want %v", dirs, wantDirs)
	}
	opt := ScanOptions{Home: f.Home, GitDirs: dirs}
	base, err := Scan(wt, opt)
	if err != nil {
		t.Fatal(err)
	}
	if fs := Compare(base, base); len(fs) != 0 {
		t.Fatalf("baseline: %v", fs)
	}
	wtc := f.Write(".git/worktrees/wt/config.worktree", payload, 0o644)
	// The common config's relative core.hooksPath resolves in the worktree.
	hook := f.Write(filepath.Join(wt, ".githooks/pre-commit"), "#!/bin/sh\n", 0o755)
	f.GitdirAt(".git/modules/m")
	mod := f.Write(".git/modules/m/config", payload, 0o644)
	cur, err := Scan(wt, opt)
	if err != nil {
		t.Fatal(err)
	}
	fs := Compare(base, cur)
	for _, p := range []string{wtc, mod, hook} {
		if findingAt(fs, p) == nil {
			t.Errorf("no finding for %s: %v", p, fs)
		}
	}
}

// BenchmarkScan measures one scan of a working tree of 20,000 files in 2,000
// directories (the audit scans twice per session: baseline and after).
func BenchmarkScan(b *testing.B) {
	root := b.TempDir()
	for d := range 2000 {
		dir := filepath.Join(root, "src", strconv.Itoa(d%40), strconv.Itoa(d))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range 10 {
			if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(f)), nil, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	repo, _ := filepath.EvalSymlinks(root)
	for b.Loop() {
		if _, err := Scan(repo, ScanOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestAuditIncludeFanOut checks that a config including itself many times does not
// make the audit work exponentially, and that a new include chain is reported.
func TestAuditIncludeFanOut(t *testing.T) {
	f := newFixture(t)
	base := f.scan()
	f.GitdirAt(".git/modules/m")
	self := strings.Repeat("[include]\n\tpath = config\n", 20)
	p := f.Write(".git/modules/m/config", self+"[include]\n\tpath = ../../../inc/a\n", 0o644)
	a := f.Write("inc/a", "[include]\n\tpath = b\n", 0o644)
	b := f.Write("inc/b", payload, 0o644)
	done := make(chan []Finding)
	go func() { done <- Compare(base, f.scan()) }()
	select {
	case fs := <-done:
		for _, want := range []string{p, a, b} {
			if findingAt(fs, want) == nil {
				t.Errorf("no finding for %s: %v", want, fs)
			}
		}
	case <-time.After(time.Minute):
		t.Fatal("audit did not finish on a self-including config")
	}
}

// TestAuditUnrelatedEdits checks that editing files no hook or config names, and
// files only a hook's comment mentions, produces no finding.
func TestAuditUnrelatedEdits(t *testing.T) {
	f := newFixture(t)
	preInclude(f)
	base := f.scan()
	f.Write("scripts/not-this.sh", "#!/bin/sh\necho changed\n", 0o755)
	f.Write("README", "changed\n", 0o644)
	f.Write(".githooks/post-merge", "#!/bin/sh\necho still not executable\n", 0o644)
	if fs := Compare(base, f.scan()); len(fs) != 0 {
		t.Errorf("findings: %v", fs)
	}
}

// TestQuarantineLongName checks that a name at the length limit is still moved.
func TestQuarantineLongName(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, strings.Repeat("h", 255))
	if err := os.WriteFile(p, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	fs := []Finding{{Path: p, Kind: KindHook}}
	Quarantine(fs, NewAuditID())
	if fs[0].MoveErr != nil || !strings.Contains(fs[0].Moved, QuarantineSuffix) {
		t.Fatalf("%+v", fs[0])
	}
	if _, err := os.Lstat(p); err == nil {
		t.Errorf("%s still in place", p)
	}
}

// symlinkAt makes a symlink to target at link, its parent made, and returns link.
// unusedFanout names a loose-object directory the fixture's commits did
// not create: which two-digit prefixes exist depends on the commit time.
func unusedFanout(t *testing.T, objects string) string {
	t.Helper()
	for i := 0; i < 256; i++ {
		p := filepath.Join(objects, fmt.Sprintf("%02x", i))
		if _, err := os.Lstat(p); os.IsNotExist(err) {
			return p
		}
	}
	t.Fatalf("every object directory under %s exists", objects)
	return ""
}

func symlinkAt(t *testing.T, target, link string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Remove(link)
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	return link
}
