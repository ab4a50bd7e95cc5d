package adversarial

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/nsinit"
)

// gitDirScript, run in a linked worktree, plants in the Git directory $G
// (outside the worktree, bound writable) a module gitdir whose config runs a
// program, says so (ready), and waits until the racing process has moved $G
// away (go).
const gitDirScript = `set -e
git init -q --bare "$G/modules/m"
git --git-dir="$G/modules/m" config core.fsmonitor "touch $PWNED/fsmonitor"
touch ready
i=0; while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
rm -f ready go
`

// TestAuditFollowsMovedGitDir: a linked worktree's session writes Git
// directories outside the worktree (the main repository's common dir, and the
// worktree's own gitdir in it). At the session's end a racing process that can
// write their parents renames one away and puts a clean directory or a symlink
// at its path. The audit reads the directory the session wrote, held since the
// launch, wherever it lies now: the plant is reported and moved aside there.
func TestAuditFollowsMovedGitDir(t *testing.T) {
	rows := []struct {
		name   string
		common bool // the common dir is moved, not the worktree's own gitdir
		decoy  string
	}{
		{"common dir, symlink at its path", true, "symlink"},
		{"common dir, another directory at its path", true, "dir"},
		{"worktree gitdir, symlink at its path", false, "symlink"},
		{"worktree gitdir, another directory at its path", false, "dir"},
	}
	runners := sandboxtest.Backends(t)
	if nsinit.RawInitAvailable() {
		runners = append(runners, sandboxtest.NativeGo)
	}
	for _, backend := range runners {
		for _, row := range rows {
			t.Run(backend+"/"+row.name, func(t *testing.T) {
				x := newTarget(t, backend)
				testenv.Git(t, x.Home, x.Repo, "add", "README")
				testenv.Git(t, x.Home, x.Repo, "commit", "-q", "-m", "init")
				wt := filepath.Join(x.Home, "wt")
				testenv.Git(t, x.Home, x.Repo, "worktree", "add", "-q", wt)
				common := filepath.Join(x.Repo, ".git")
				dir := filepath.Join(common, "worktrees", "wt")
				if row.common {
					dir = common
				}
				cmd := x.Command(wt, []string{"--no-git-save"}, gitDirScript)
				cmd.Env = append(cmd.Env, "PWNED="+x.Pwned, "G="+dir)
				ended := start(t, cmd)
				if r, ok := untilReady(filepath.Join(wt, "ready"), ended); !ok {
					_ = cmd.Process.Kill()
					t.Fatalf("the session never said it was ready:\n%s", r)
				}
				// Out of the common dir, where the end scan by path would not look.
				moved := filepath.Join(x.Repo, "gitdir-moved")
				moveAway(t, x, dir, moved, row.decoy)
				sandboxtest.WriteFile(t, filepath.Join(wt, "go"), "")
				r := <-ended
				if !strings.Contains(r.Stderr, "Git directory "+dir+" was moved during the session to "+moved) {
					t.Errorf("the audit did not say where the Git directory went:\n%s", r)
				}
				plant := filepath.Join(moved, "modules/m/config")
				if !strings.Contains(r.Stderr, plant+" (config)") {
					t.Errorf("the plant in the moved Git directory was not reported at the path it has now:\n%s", r)
				}
				if b, err := os.ReadFile(plant); err == nil && strings.Contains(string(b), "fsmonitor") {
					t.Errorf("the plant was left at %s", plant)
				}
			})
		}
	}
}
