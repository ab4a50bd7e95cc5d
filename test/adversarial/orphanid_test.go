package adversarial

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestKilledLauncherRepoReplaced: a launcher killed mid-session leaves its
// pending audit; before the next launch the repository is moved away and a new
// one (its own core.fsmonitor set by the user) is made at its path. The next
// launch does not audit the new repository against the dead session's baseline:
// it says the directory at the path is not the one that session wrote and what
// to do, and leaves the new repository's config alone.
func TestKilledLauncherRepoReplaced(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			x := newTarget(t, backend)
			killLauncherMidSession(t, x, "true")
			if err := os.Rename(x.Repo, x.Repo+".moved"); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(x.Repo, 0o755); err != nil {
				t.Fatal(err)
			}
			testenv.Chown(t, x.Repo)
			testenv.Git(t, x.Home, x.Repo, "init", "-q")
			testenv.Git(t, x.Home, x.Repo, "config", "core.fsmonitor", "the-users-own-monitor")
			r := sandboxtest.Run(x.Command(x.Repo, []string{"--no-git-save", "--no-record"}, "true"))
			if !strings.Contains(r.Stderr, "is another directory now") || !strings.Contains(r.Stderr, "not audited") {
				t.Errorf("the next launch did not say the repository was replaced:\n%s", r)
			}
			b, err := os.ReadFile(filepath.Join(x.Repo, ".git/config"))
			if err != nil || !strings.Contains(string(b), "the-users-own-monitor") {
				t.Errorf("the new repository's own config was taken for a plant (%v):\n%s", err, r)
			}
			if j, _ := filepath.Glob(filepath.Join(x.Home, ".local/state/agentbox/audit-pending/*.journal")); len(j) != 0 {
				t.Errorf("the pending audit stayed: %v", j)
			}
		})
	}
}

// TestKilledLauncherAddDirAuditedAtRepoLaunch: a launcher killed mid-session with
// --add-dir leaves the added directory's audit pending; the next launch in the same
// repository runs it, though it does not add the directory again (a dropped flag,
// or a repository file that narrows add-dir away): the plant in the added
// directory's .git is moved aside, and its journal goes.
func TestKilledLauncherAddDirAuditedAtRepoLaunch(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			x := newTarget(t, backend)
			lib := testenv.Dir(t, "lib")
			testenv.Chown(t, lib)
			testenv.Git(t, x.Home, lib, "init", "-q")
			killLauncherMidSession(t, x, "ln -s '"+x.Outside+"' '"+lib+"/.git/refs/heads/out'", "--add-dir", lib)
			plant := filepath.Join(lib, ".git/refs/heads/out")
			if _, err := os.Lstat(plant); err != nil {
				t.Fatalf("the session did not plant: %v", err)
			}
			r := sandboxtest.Run(x.Command(x.Repo, []string{"--no-git-save", "--no-record"}, "true"))
			if !strings.Contains(r.Stderr, "was killed before its audit; audited now: 1 finding(s)") {
				t.Errorf("the next launch in the repository did not run the added directory's pending audit:\n%s", r)
			}
			if _, err := os.Lstat(plant); err == nil {
				t.Errorf("the symlink out of the added directory's .git was left:\n%s", r)
			}
			if j, _ := filepath.Glob(filepath.Join(x.Home, ".local/state/agentbox/audit-pending/*.journal")); len(j) != 0 {
				t.Errorf("a pending audit stayed: %v", j)
			}
		})
	}
}

// TestKilledLauncherWorktreeReplaced: a launcher killed mid-session in a linked
// worktree, whose session linked the main worktree's reflog (in the common dir it
// writes) to a file of the operator's; the worktree is then removed and added
// again. The next launch, in the main worktree, does not audit the new worktree
// against the dead session's baseline, but audits the common dir, which is still
// the one the session wrote: the link is moved aside, and one line says what was
// not audited.
func TestKilledLauncherWorktreeReplaced(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			x := newTarget(t, backend)
			testenv.Git(t, x.Home, x.Repo, "add", "README")
			testenv.Git(t, x.Home, x.Repo, "commit", "-q", "-m", "init")
			wt := filepath.Join(x.Home, "wt")
			testenv.Git(t, x.Home, x.Repo, "worktree", "add", "-q", wt, "-b", "wt")
			reflog := filepath.Join(x.Repo, ".git/logs/HEAD")
			killLauncherIn(t, x, wt, "rm -f '"+reflog+"' && ln -s '"+x.Victim+"' '"+reflog+"'")
			if l, err := os.Readlink(reflog); err != nil || l != x.Victim {
				t.Fatalf("the session did not plant: %q %v", l, err)
			}
			testenv.Git(t, x.Home, x.Repo, "worktree", "remove", "--force", wt)
			testenv.Git(t, x.Home, x.Repo, "worktree", "add", "-q", wt, "wt")
			r := sandboxtest.Run(x.Command(x.Repo, []string{"--no-git-save", "--no-record"}, "true"))
			if !strings.Contains(r.Stderr, "audited now only its Git directories") {
				t.Errorf("the next launch did not say what of the dead session's audit ran:\n%s", r)
			}
			if l, err := os.Readlink(reflog); err == nil {
				t.Errorf("the main worktree's reflog still leads to %s:\n%s", l, r)
			}
			if b, err := os.ReadFile(x.Victim); err != nil || string(b) != "host data\n" {
				t.Errorf("the operator's file changed (%v): %q", err, b)
			}
		})
	}
}

// TestKilledLauncherRepoReachedByAnotherPath: a launcher killed mid-session leaves
// its pending audit, keyed by the repository's path; the next launch (or
// `agentbox audit`) reaches the same repository by another path: moved, with a
// symlink left at its old path (the launch resolves it to the new one), or, as
// root, through a bind mount of it. The missed audit is found by the
// repository's identity and runs: the symlink out the session planted below
// .git/refs is moved aside, and the journal goes.
func TestKilledLauncherRepoReachedByAnotherPath(t *testing.T) {
	ways := []string{"moved"}
	if os.Geteuid() == 0 {
		ways = append(ways, "bind")
	}
	for _, backend := range sandboxtest.Backends(t) {
		for _, way := range ways {
			for _, next := range []string{"exec", "audit"} {
				t.Run(backend+"/"+way+"/"+next, func(t *testing.T) {
					x := newTarget(t, backend)
					killLauncherMidSession(t, x, "ln -s '"+x.Outside+"' .git/refs/heads/out")
					if _, err := os.Lstat(filepath.Join(x.Repo, ".git/refs/heads/out")); err != nil {
						t.Fatalf("the session did not plant: %v", err)
					}
					dir := reachRepoAnotherWay(t, x.Repo, way)
					plant := filepath.Join(dir, ".git/refs/heads/out")
					var r sandboxtest.Result
					if next == "exec" {
						r = sandboxtest.Run(x.Command(dir, []string{"--no-git-save", "--no-record"}, "true"))
					} else {
						r = sandboxtest.Run(x.Agentbox(dir, "audit", "--repo", dir))
					}
					if !strings.Contains(r.Stderr, "was killed before its audit; audited now: 1 finding(s)") {
						t.Errorf("agentbox %s through another path to the repository: the missed audit did not run:\n%s", next, r)
					}
					if _, err := os.Lstat(plant); err == nil {
						t.Errorf("the symlink out of .git/refs was left:\n%s", r)
					}
					if j, _ := filepath.Glob(filepath.Join(x.Home, ".local/state/agentbox/audit-pending/*.journal")); len(j) != 0 {
						t.Errorf("the pending audit stayed: %v", j)
					}
				})
			}
		}
	}
}

// reachRepoAnotherWay gives the repository at repo a second path and returns the
// path the next launch goes through.
func reachRepoAnotherWay(t *testing.T, repo, way string) string {
	t.Helper()
	switch way {
	case "moved":
		if err := os.Rename(repo, repo+".moved"); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Base(repo)+".moved", repo); err != nil {
			t.Fatal(err)
		}
		return repo
	case "bind":
		alias := filepath.Join(testenv.Dir(t, "alias"), "repo")
		if err := os.Mkdir(alias, 0o755); err != nil {
			t.Fatal(err)
		}
		testenv.Chown(t, filepath.Dir(alias))
		if err := unix.Mount(repo, alias, "", unix.MS_BIND, ""); err != nil {
			t.Fatalf("bind mount: %v", err)
		}
		t.Cleanup(func() { _ = unix.Unmount(alias, unix.MNT_DETACH) })
		return alias
	}
	t.Fatalf("unknown way %q", way)
	return ""
}

// TestKilledLauncherAddDirReachedByAnotherPath: the same for an --add-dir
// directory's pending audit: the directory is moved, a symlink left at its old
// path, and the next launch adds it through that symlink.
func TestKilledLauncherAddDirReachedByAnotherPath(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			x := newTarget(t, backend)
			lib := filepath.Join(testenv.Dir(t, "libs"), "lib")
			if err := os.Mkdir(lib, 0o755); err != nil {
				t.Fatal(err)
			}
			testenv.Chown(t, filepath.Dir(lib))
			testenv.Chown(t, lib)
			testenv.Git(t, x.Home, lib, "init", "-q")
			killLauncherMidSession(t, x, "ln -s '"+x.Outside+"' '"+lib+"/.git/refs/heads/out'", "--add-dir", lib)
			dir := reachRepoAnotherWay(t, lib, "moved")
			plant := filepath.Join(dir, ".git/refs/heads/out")
			if _, err := os.Lstat(plant); err != nil {
				t.Fatalf("the session did not plant: %v", err)
			}
			r := sandboxtest.Run(x.Command(x.Repo, []string{"--no-git-save", "--no-record", "--add-dir", dir}, "true"))
			if !strings.Contains(r.Stderr, "was killed before its audit; audited now: 1 finding(s)") {
				t.Errorf("the next launch adding the directory by another path did not run its pending audit:\n%s", r)
			}
			if _, err := os.Lstat(plant); err == nil {
				t.Errorf("the symlink out of the added directory's .git was left:\n%s", r)
			}
		})
	}
}
