package adversarial

import (
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
