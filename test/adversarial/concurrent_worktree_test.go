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

// Two sessions of one repository through two of its worktrees: A in a linked
// worktree writes the common Git directory, which is inside the main worktree's
// repository. A plants a submodule gitdir with core.fsmonitor there, B starts in the
// main worktree, A takes the plant away before its own audit, and B, once A has
// ended, writes it again and points a gitlink at it. Neither audit may take A's plant
// for the user's: after both, the operator's `git status` in the main worktree must
// run nothing.
func TestTwoSessionsLinkedWorktrees(t *testing.T) {
	const plant = `plantmod() { M="$COMMON/modules/x"; rm -rf "$M"; git init -q --bare "$M"
	git config -f "$M/config" core.bare false; git config -f "$M/config" core.worktree ../../../x
	git config -f "$M/config" core.fsmonitor "touch $PWNED/fsmonitor"; }
`
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			x := newPair(t, backend)
			testenv.Git(t, x.Home, x.Repo, "add", "README")
			testenv.Git(t, x.Home, x.Repo, "commit", "-q", "-m", "init")
			wt := filepath.Join(x.Home, "wt")
			testenv.Git(t, x.Home, x.Repo, "worktree", "add", "-q", wt, "-b", "wt")
			if err := os.Mkdir(filepath.Join(wt, ".sync"), 0o777); err != nil {
				t.Fatal(err)
			}
			testenv.Chown(t, wt)
			// Each session signals in its own worktree; the test signals in both.
			signal, await := syncIn(t, filepath.Join(x.Repo, ".sync"), filepath.Join(wt, ".sync"))
			start := func(dir, script string) chan sandboxtest.Result {
				cmd := x.Command(dir, nil, syncPrelude+plant+script)
				cmd.Env = append(cmd.Env, "PWNED="+x.Pwned, "COMMON="+filepath.Join(x.Repo, ".git"), "REPO="+dir)
				return startCmd(t, cmd)
			}
			a := start(wt, `plantmod; signal A-planted; await A-go; rm -rf "$COMMON/modules"`)
			await("A-planted")
			b := start(x.Repo, `signal B-started; await B-go; plantmod
mkdir -p x; echo "gitdir: ../.git/modules/x" > x/.git
git update-index --add --cacheinfo "160000,$(git rev-parse HEAD),x"`)
			await("B-started")
			signal("A-go")
			ra := x.wait("A", a)
			signal("B-go")
			rb := x.wait("B", b)
			operatorGitRunsNothing(t, x.target)
			config := filepath.Join(x.Repo, ".git/modules/x/config")
			if !strings.Contains(ra.Stderr+rb.Stderr, "agentbox: audit: "+config) {
				t.Errorf("the planted %s was not reported by either session's audit", config)
			}
			if t.Failed() {
				t.Logf("session A:\n%s\nsession B:\n%s", ra, rb)
			}
		})
	}
}

// syncIn returns the turn-taking of two sessions that each write only their own
// sync directory: signal writes NAME in every one, await waits for it in any.
func syncIn(t *testing.T, dirs ...string) (signal, await func(string)) {
	signal = func(name string) {
		for _, d := range dirs {
			sandboxtest.WriteFile(t, filepath.Join(d, name), "")
		}
	}
	await = func(name string) {
		t.Helper()
		if !sandboxtest.WaitForUpTo(2*time.Minute, func() bool {
			for _, d := range dirs {
				if sandboxtest.Exists(filepath.Join(d, name)) {
					return true
				}
			}
			return false
		}) {
			t.Fatalf("never signalled: %s", name)
		}
	}
	return signal, await
}

// startCmd starts cmd and returns its result channel; the session is killed
// when the test ends.
func startCmd(t *testing.T, cmd *exec.Cmd) chan sandboxtest.Result {
	t.Helper()
	res := make(chan sandboxtest.Result, 1)
	if err := sandboxtest.StartAndCollect(cmd, res); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return res
}

// TestTwoSessionsRepoAndSubdir: the same through --repo R beside --repo R/src. A,
// on R, plants a nested repository with core.fsmonitor in src; B starts on R/src,
// A takes the plant away before its own audit, and B writes it again once A has
// ended. B's baseline must not be the tree with A's plant in it.
func TestTwoSessionsRepoAndSubdir(t *testing.T) {
	const plant = `plantsub() { git init -q "$SRC/sub" 2>/dev/null || true
	printf '[core]\n\tfsmonitor = touch %s/fsmonitor\n' "$PWNED" > "$SRC/sub/.git/config"; }
`
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			x := newPair(t, backend)
			src := filepath.Join(x.Repo, "src")
			if err := os.MkdirAll(filepath.Join(src, ".sync"), 0o777); err != nil {
				t.Fatal(err)
			}
			testenv.Chown(t, x.Repo)
			signal, await := syncIn(t, filepath.Join(x.Repo, ".sync"), filepath.Join(src, ".sync"))
			start := func(repo, script string) chan sandboxtest.Result {
				cmd := x.Command(repo, []string{"--repo", repo}, syncPrelude+plant+script)
				cmd.Env = append(cmd.Env, "PWNED="+x.Pwned, "SRC="+src, "REPO="+repo)
				return startCmd(t, cmd)
			}
			a := start(x.Repo, `plantsub; signal A-planted; await A-go; rm -rf "$SRC/sub"`)
			await("A-planted")
			b := start(src, `signal B-started; await B-go; plantsub`)
			await("B-started")
			signal("A-go")
			ra := x.wait("A", a)
			signal("B-go")
			rb := x.wait("B", b)
			sub := filepath.Join(src, "sub")
			if sandboxtest.Exists(sub) {
				operatorGitRunsNothingIn(t, x.target, sub)
			}
			config := filepath.Join(sub, ".git/config")
			if !strings.Contains(ra.Stderr+rb.Stderr, "agentbox: audit: "+config) {
				t.Errorf("the planted %s was not reported by either session's audit", config)
			}
			if t.Failed() {
				t.Logf("session A:\n%s\nsession B:\n%s", ra, rb)
			}
		})
	}
}
