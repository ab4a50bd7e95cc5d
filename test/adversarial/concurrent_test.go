package adversarial

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// Two real sessions on one repository (issue 14 §4): a plant of one session must not
// survive through the other — not through its baseline, not by being hidden from an
// audit and put back, not by a quarantined file moved back. After both sessions the
// host is checked: the operator's Git runs nothing and the planted key is gone.

// syncDir is the directory in the repository through which the test and the two
// sessions take turns: a session's `signal NAME` creates .sync/NAME, `await NAME`
// waits for it; the test does the same from the host.
const syncPrelude = `set -e
signal() { touch "$REPO/.sync/$1"; }
await() { n=0; while [ ! -e "$REPO/.sync/$1" ]; do sleep 0.05; n=$((n+1)); [ $n -lt 6000 ] || exit 97; done; }
plant() { git init -q sub 2>/dev/null || true; printf '[core]\n\tfsmonitor = touch %s/fsmonitor\n' "$PWNED" > sub/.git/config; }
`

// pair is one row's fixture: the target and the two sessions' channels.
type pair struct {
	*target
	t *testing.T
}

func (x *pair) signal(name string) {
	x.t.Helper()
	sandboxtest.WriteFile(x.t, filepath.Join(x.Repo, ".sync", name), "")
}

func (x *pair) await(name string) {
	x.t.Helper()
	if !sandboxtest.WaitForUpTo(2*time.Minute, func() bool { return sandboxtest.Exists(filepath.Join(x.Repo, ".sync", name)) }) {
		x.t.Fatalf("never signalled: %s", name)
	}
}

// start starts a session running script (after syncPrelude) and returns its result
// channel; it is recorded and snapshotted as a user's session would be.
func (x *pair) start(script string) (*exec.Cmd, chan sandboxtest.Result) {
	x.t.Helper()
	cmd := x.Command(x.Repo, nil, syncPrelude+script)
	cmd.Env = append(cmd.Env, "PWNED="+x.Pwned)
	res := make(chan sandboxtest.Result, 1)
	if err := sandboxtest.StartAndCollect(cmd, res); err != nil {
		x.t.Fatal(err)
	}
	x.t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, res
}

// wait returns the session's result, failing the test when it does not end: a
// bound against hangs, not a timing assertion.
func (x *pair) wait(name string, res chan sandboxtest.Result) sandboxtest.Result {
	x.t.Helper()
	select {
	case r := <-res:
		if r.Code != 0 {
			x.t.Errorf("session %s: %s", name, r)
		}
		return r
	case <-time.After(5 * time.Minute):
		x.t.Fatalf("session %s did not end", name)
	}
	return sandboxtest.Result{}
}

// noPlant checks the host after both sessions: the nested repository has no
// fsmonitor, the operator's Git runs nothing there or in the repository, and no
// quarantined file is left inside the repository for a session to move back.
func (x *pair) noPlant(outputs ...sandboxtest.Result) {
	x.t.Helper()
	sub := filepath.Join(x.Repo, "sub")
	cmd := testenv.Command(x.t, x.Home, "git", "-C", sub, "config", "--get", "core.fsmonitor")
	if out, _ := cmd.CombinedOutput(); strings.Contains(string(out), "touch") {
		x.t.Errorf("planted core.fsmonitor active on the host: %s", out)
	}
	operatorGitRunsNothing(x.t, x.target)
	if sandboxtest.Exists(sub) {
		operatorGitRunsNothingIn(x.t, x.target, sub)
	}
	reported := false
	for _, r := range outputs {
		reported = reported || strings.Contains(r.Stderr, "agentbox: audit: "+filepath.Join(sub, ".git/config"))
	}
	if !reported {
		x.t.Errorf("the plant was not reported by either session's audit")
	}
	if x.t.Failed() {
		for i, r := range outputs {
			x.t.Logf("session %d:\n%s", i, r)
		}
	}
}

// quarantinedInRepo lists files quarantined in place inside the repository.
func quarantinedInRepo(repo string) []string {
	var found []string
	_ = filepath.Walk(repo, func(p string, _ os.FileInfo, err error) error {
		if err == nil && strings.Contains(filepath.Base(p), ".agentbox-quarantine-") {
			found = append(found, p)
		}
		return nil
	})
	return found
}

func newPair(t *testing.T, backend string) *pair {
	x := &pair{target: newTarget(t, backend), t: t}
	if err := os.Mkdir(filepath.Join(x.Repo, ".sync"), 0o777); err != nil {
		t.Fatal(err)
	}
	testenv.Chown(t, x.Repo)
	return x
}

func TestTwoSessionsOneRepo(t *testing.T) {
	rows := []struct {
		name string
		run  func(x *pair) []sandboxtest.Result
	}{
		// A plants and stays; B starts and ends; A ends. A's audit moves the plant.
		{"A plants, B starts and ends, A ends", func(x *pair) []sandboxtest.Result {
			_, a := x.start(`plant; signal A-planted; await A-go`)
			x.await("A-planted")
			_, b := x.start(`echo B ran`)
			rb := x.wait("B", b)
			x.signal("A-go")
			return []sandboxtest.Result{rb, x.wait("A", a)}
		}},
		// B starts after A planted, A's audit moves the plant, B writes it again: B's
		// baseline must not be the tree with A's plant in it.
		{"B plants again what A's audit moved", func(x *pair) []sandboxtest.Result {
			_, a := x.start(`plant; signal A-planted; await A-go`)
			x.await("A-planted")
			_, b := x.start(`signal B-started; await B-go; plant; signal B-done; await B-end`)
			x.await("B-started")
			x.signal("A-go")
			ra := x.wait("A", a)
			x.signal("B-go")
			x.await("B-done")
			x.signal("B-end")
			return []sandboxtest.Result{ra, x.wait("B", b)}
		}},
		// B plants again and again while A's audit walks and moves things.
		{"B plants over and over while A's audit runs", func(x *pair) []sandboxtest.Result {
			_, a := x.start(`plant; signal A-planted; await A-go`)
			x.await("A-planted")
			_, b := x.start(`signal B-started; await B-go
				while [ ! -e "$REPO/.sync/B-stop" ]; do plant || true; done; signal B-done; await B-end`)
			x.await("B-started")
			x.signal("B-go")
			x.signal("A-go")
			ra := x.wait("A", a)
			x.signal("B-stop")
			x.await("B-done")
			x.signal("B-end")
			return []sandboxtest.Result{ra, x.wait("B", b)}
		}},
		// B hides A's plant from A's audit (the walk finds nothing) and puts it back
		// after: the audit of the last session re-checks against the old baseline.
		{"B hides A's plant over A's audit and puts it back", func(x *pair) []sandboxtest.Result {
			_, a := x.start(`plant; signal A-planted; await A-go`)
			x.await("A-planted")
			_, b := x.start(`signal B-started; await B-hide; mv sub/.git/config sub/.git/hidden; signal B-hidden
				await B-restore; mv sub/.git/hidden sub/.git/config; signal B-restored; await B-end`)
			x.await("B-started")
			x.signal("B-hide")
			x.await("B-hidden")
			x.signal("A-go")
			ra := x.wait("A", a)
			x.signal("B-restore")
			x.await("B-restored")
			x.signal("B-end")
			return []sandboxtest.Result{ra, x.wait("B", b)}
		}},
		// B, still running, moves the file A's audit quarantined back into place.
		{"B restores what A's audit quarantined", func(x *pair) []sandboxtest.Result {
			_, a := x.start(`plant; signal A-planted; await A-go`)
			x.await("A-planted")
			_, b := x.start(`signal B-started; await B-restore
				find . -name '*.agentbox-quarantine-*' | while read -r f; do mv "$f" "${f%%.agentbox-quarantine-*}" && echo RESTORED "$f"; done
				signal B-restored; await B-end`)
			x.await("B-started")
			x.signal("A-go")
			ra := x.wait("A", a)
			if q := quarantinedInRepo(x.Repo); len(q) > 0 {
				x.t.Errorf("quarantined files left inside the repository, where a running session reaches them: %v", q)
			}
			x.signal("B-restore")
			x.await("B-restored")
			x.signal("B-end")
			return []sandboxtest.Result{ra, x.wait("B", b)}
		}},
	}
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			for _, row := range rows {
				t.Run(row.name, func(t *testing.T) {
					x := newPair(t, backend)
					outs := row.run(x)
					x.noPlant(outs...)
					for _, r := range outs {
						if strings.Contains(r.Stdout, "RESTORED") {
							t.Logf("a session moved a quarantined file back: %s", grepLines(r.Stdout, "RESTORED"))
						}
					}
				})
			}
		})
	}
}
