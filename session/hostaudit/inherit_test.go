package hostaudit

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/gitguard"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/session/prepare"
)

// linkedWorktree makes a repository with a linked worktree, the common dir's
// config naming a core.fsmonitor of the user's own, and returns the worktree and
// the Git dirs a session in it writes (gitguard.OutsideGitDirs).
func linkedWorktree(t *testing.T) (wt string, gitDirs []string) {
	t.Helper()
	top, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	main, wt := filepath.Join(top, "main"), filepath.Join(top, "wt")
	git := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-C", main}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if err := os.Mkdir(main, 0o755); err != nil {
		t.Fatal(err)
	}
	git("init", "-q")
	git("commit", "-q", "--allow-empty", "-m", "init")
	git("worktree", "add", "-q", wt)
	git("config", "core.fsmonitor", "the-users-own-monitor")
	gitDirs = gitguard.OutsideGitDirs(wt)
	if len(gitDirs) != 1 {
		t.Fatalf("no linked worktree at %s: %v", wt, gitDirs)
	}
	return wt, gitDirs
}

// TestInheritAcrossGitDirs: two sessions of one linked worktree, one that writes
// its Git dirs (a session in it) and one that does not (a session granted it with
// --add-dir), in either order. The second inherits the first's baseline; its audit
// takes neither the worktree's .git file nor the user's own common-dir config for
// a plant.
func TestInheritAcrossGitDirs(t *testing.T) {
	for _, firstWrites := range []bool{true, false} {
		wt, gitDirs := linkedWorktree(t)
		p := &policy.Policy{Repo: wt, StateDir: t.TempDir()}
		var stderr bytes.Buffer
		cfg := &Config{Stderr: &stderr, NoRecord: true}
		dirs := [2][]string{nil, gitDirs}
		if firstWrites {
			dirs = [2][]string{gitDirs, nil}
		}
		first, err := Start(cfg, p, dirs[0])
		if err != nil {
			t.Fatal(err)
		}
		second, err := Start(cfg, p, dirs[1])
		if err != nil {
			t.Fatal(err)
		}
		var out Outcome
		second.Finish(cfg, &out)
		first.Finish(cfg, &out)
		if len(out.AuditFindings) != 0 {
			t.Errorf("first writes the Git dirs %v: findings in an untouched worktree: %q", firstWrites, out.AuditFindings)
		}
		for _, f := range []string{filepath.Join(wt, ".git"), filepath.Join(gitDirs[0], "config")} {
			if _, err := os.Lstat(f); err != nil {
				t.Errorf("first writes the Git dirs %v: %s was moved aside: %v", firstWrites, f, err)
			}
		}
		if b, _ := os.ReadFile(filepath.Join(gitDirs[0], "config")); !strings.Contains(string(b), "the-users-own-monitor") {
			t.Errorf("first writes the Git dirs %v: the user's own config changed", firstWrites)
		}
	}
}

// TestUnboundGitDir: the launch is refused unless the audit holds the Git dirs
// the plan binds (their identities in mounts.Session.SourceIDs).
func TestUnboundGitDir(t *testing.T) {
	wt, gitDirs := linkedWorktree(t)
	p := &policy.Policy{Repo: wt, StateDir: t.TempDir()}
	a, err := Start(&Config{Stderr: &bytes.Buffer{}, NoRecord: true}, p, gitDirs)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Drop()
	id, err := prepare.Identify(gitDirs[0])
	if err != nil {
		t.Fatal(err)
	}
	if d := a.UnboundGitDir(map[string]mounts.FileID{gitDirs[0]: id}); d != "" {
		t.Errorf("the bound common dir is the held one, yet %s is said unbound", d)
	}
	id.Ino++
	if d := a.UnboundGitDir(map[string]mounts.FileID{gitDirs[0]: id}); d != gitDirs[0] {
		t.Errorf("another directory bound at %s: UnboundGitDir = %q", gitDirs[0], d)
	}
}
