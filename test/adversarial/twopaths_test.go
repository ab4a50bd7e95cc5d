package adversarial

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestTwoSessionsTwoPaths: "B plants again what A's audit moved" (TestTwoSessionsOneRepo)
// with B launched through another path to the repository while A runs: the
// repository moved away (a symlink left at its old path), or a bind mount of it. B
// must inherit A's baseline, by the directory's identity, and its audit find the
// plant it wrote again; before, B's baseline was the tree with A's plant in it, and
// the plant stayed for the operator's Git.
func TestTwoSessionsTwoPaths(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			for _, way := range []string{"moved", "bind"} {
				t.Run(way, func(t *testing.T) {
					x := newPair(t, backend)
					_, a := x.start(`plant; signal A-planted; await A-go`)
					x.await("A-planted")
					other := reachRepoAnotherWay(t, x.Repo, way)
					if way == "moved" {
						other = x.Repo + ".moved"
					}
					cmd := x.Command(other, nil, syncPrelude+`signal B-started; await B-go; plant; signal B-done; await B-end`)
					cmd.Env = append(cmd.Env, "PWNED="+x.Pwned, "REPO="+other)
					b := make(chan sandboxtest.Result, 1)
					if err := sandboxtest.StartAndCollect(cmd, b); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = cmd.Process.Kill() })
					x.await("B-started")
					x.signal("A-go")
					ra := x.wait("A", a)
					x.signal("B-go")
					x.await("B-done")
					x.signal("B-end")
					rb := x.wait("B", b)
					sub := filepath.Join(other, "sub")
					out, _ := testenv.Command(t, x.Home, "git", "-C", sub, "config", "--get", "core.fsmonitor").CombinedOutput()
					if strings.Contains(string(out), "touch") {
						t.Errorf("%s: the plant B wrote again is active on the host: %s", way, out)
					}
					if !strings.Contains(rb.Stderr, "agentbox: audit: "+filepath.Join(sub, ".git/config")) {
						t.Errorf("%s: B's audit did not report the plant it wrote again", way)
					}
					operatorGitRunsNothingIn(t, x.target, sub)
					if t.Failed() {
						t.Logf("A:\n%s\nB:\n%s", ra, rb)
					}
				})
			}
		})
	}
}

// TestKilledLauncherAddDirAuditedAtRepoReachedByAnotherPath: as
// TestKilledLauncherAddDirAuditedAtRepoLaunch, but the next launch, which does not
// add the directory, works in the session's repository through another path (moved
// with a symlink left at its old path, or a bind mount): the added directory's
// pending audit runs there too.
func TestKilledLauncherAddDirAuditedAtRepoReachedByAnotherPath(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			for _, way := range []string{"moved", "bind"} {
				t.Run(way, func(t *testing.T) {
					x := newTarget(t, backend)
					lib := testenv.Dir(t, "lib")
					testenv.Chown(t, lib)
					testenv.Git(t, x.Home, lib, "init", "-q")
					killLauncherMidSession(t, x, "ln -s '"+x.Outside+"' '"+lib+"/.git/refs/heads/out'", "--add-dir", lib)
					plant := filepath.Join(lib, ".git/refs/heads/out")
					if _, err := os.Lstat(plant); err != nil {
						t.Fatalf("the session did not plant: %v", err)
					}
					other := reachRepoAnotherWay(t, x.Repo, way)
					r := sandboxtest.Run(x.Command(other, []string{"--no-git-save", "--no-record"}, "true"))
					if !strings.Contains(r.Stderr, "was killed before its audit; audited now: 1 finding(s)") {
						t.Errorf("the next launch in the repository through %s did not run the added directory's pending audit:\n%s", other, r)
					}
					if _, err := os.Lstat(plant); err == nil {
						t.Errorf("the symlink out of the added directory's .git was left:\n%s", r)
					}
				})
			}
		})
	}
}
