package prepare

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/gitguard/pushguard"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/policy"

	"github.com/agentbox/agentbox/internal/testenv"
)

func linkedRepos(t *testing.T) (mainRepo, wt string) {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mainRepo, wt = filepath.Join(dir, "main"), filepath.Join(dir, "wt")
	if err := os.Mkdir(mainRepo, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.LocalGit(t, mainRepo, "init", "-q")
	testenv.LocalGit(t, mainRepo, "commit", "-q", "--allow-empty", "-m", "first")
	testenv.LocalGit(t, mainRepo, "worktree", "add", "-q", wt)
	return mainRepo, wt
}

func TestLinkedWorktreeBinds(t *testing.T) {
	mainRepo, wt := linkedRepos(t)
	common := filepath.Join(mainRepo, ".git")
	var stderr strings.Builder
	o := Options{Stderr: &stderr}
	m, err := linkedWorktree(o, &policy.Policy{Repo: wt})
	if err != nil {
		t.Fatal(err)
	}
	want := []mounts.Op{
		{Kind: mounts.Bind, Source: common, Dest: common},
		{Kind: mounts.BindRO, Source: filepath.Join(common, "HEAD"), Dest: filepath.Join(common, "HEAD")},
		{Kind: mounts.BindRO, Source: filepath.Join(common, "index"), Dest: filepath.Join(common, "index")},
	}
	if len(m.ops) != len(want) {
		t.Fatalf("ops %v, want %v", m.ops, want)
	}
	for i, op := range m.ops {
		op.Why = ""
		if op != want[i] {
			t.Errorf("op %d: %v, want %v", i, op, want[i])
		}
	}
	if len(m.roots) != 1 || m.roots[0] != common || stderr.Len() != 0 {
		t.Fatalf("roots %v, stderr %q", m.roots, stderr.String())
	}

	// The main repository itself, and a plain directory: nothing to add.
	for _, repo := range []string{mainRepo, t.TempDir()} {
		m, err := linkedWorktree(o, &policy.Policy{Repo: repo})
		if err != nil || len(m.ops) != 0 || len(m.roots) != 0 {
			t.Errorf("%s: %+v %v", repo, m, err)
		}
	}
}

// A worktree whose metadata does not verify, or whose common dir the repository
// rules refuse, still launches, read-only, with one line saying why.
func TestLinkedWorktreeRefused(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(t *testing.T, mainRepo, wt string) *policy.Policy
		says  string
	}{
		{"stale back pointer", func(t *testing.T, mainRepo, wt string) *policy.Policy {
			p := filepath.Join(mainRepo, ".git/worktrees/wt/gitdir")
			if err := os.WriteFile(p, []byte("/elsewhere/.git\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			return &policy.Policy{Repo: wt}
		}, "git worktree repair"},
		{"common dir contains HOME", func(t *testing.T, mainRepo, wt string) *policy.Policy {
			return &policy.Policy{Repo: wt, Home: filepath.Join(mainRepo, ".git", "home")}
		}, "HOME"},
	} {
		t.Run(c.name, func(t *testing.T) {
			mainRepo, wt := linkedRepos(t)
			p := c.setup(t, mainRepo, wt)
			var stderr strings.Builder
			m, err := linkedWorktree(Options{Stderr: &stderr}, p)
			if err != nil || len(m.ops) != 0 || len(m.roots) != 0 {
				t.Fatalf("%+v %v", m, err)
			}
			line := stderr.String()
			if strings.Count(line, "\n") != 1 || !strings.Contains(line, "stays read-only") || !strings.Contains(line, c.says) {
				t.Fatalf("message %q", line)
			}
		})
	}
}

// The guard's plan: the real Git's directory on its own tmpfs first, then the guard
// over every shadowed file; --allow-git-push has none of it.
func TestPushGuardOps(t *testing.T) {
	o := Options{}
	ops := pushGuardDryRun(o, &policy.Policy{})
	if _, err := exec.LookPath("git"); err != nil {
		if len(ops) != 0 {
			t.Fatalf("no git, ops %v", ops)
		}
		testenv.Skip(t, "no git on PATH")
	}
	if len(ops) < 3 || ops[0].Kind != mounts.Tmpfs || ops[0].Dest != "/run/agentbox/pushguard" ||
		ops[1].Kind != mounts.BindRO || ops[1].Dest != "/run/agentbox/pushguard" {
		t.Fatalf("ops %v", ops)
	}
	for _, op := range ops[2:] {
		if op.Kind != mounts.BindRO || !strings.HasPrefix(op.Source, "/tmp/agentbox-guard-") || !filepath.IsAbs(op.Dest) {
			t.Errorf("guard op %v", op)
		}
	}
	o.AllowGitPush = true
	if ops := pushGuardDryRun(o, &policy.Policy{}); len(ops) != 0 {
		t.Fatalf("--allow-git-push: %v", ops)
	}
	g, err := preparePushGuard(o, &policy.Policy{}, nil)
	if err != nil || len(g.ops) != 0 || g.staged != nil {
		t.Fatalf("--allow-git-push staged: %+v %v", g, err)
	}
	g.cleanup()
}

// The guard goes to the user's cache, unless the sandbox could write there: then it
// is staged below /tmp, as without a cache.
func TestPushGuardCacheOutsideWritable(t *testing.T) {
	if _, found, err := pushguard.FindHostGit(os.Getenv); !found || err != nil {
		testenv.Skip(t, "no git on PATH")
	}
	repo, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	o := Options{}
	outside := &policy.Policy{Repo: repo, CacheDir: filepath.Join(t.TempDir(), "agentbox")}
	g, err := preparePushGuard(o, outside, []string{repo})
	if err != nil {
		t.Fatal(err)
	}
	if g.staged != nil || len(g.ops) < 3 || !strings.HasPrefix(g.ops[2].Source, outside.CacheDir+"/pushguard/git-") {
		t.Errorf("cache outside the repository: %+v", g)
	}
	g.cleanup()
	inside := &policy.Policy{Repo: repo, CacheDir: filepath.Join(repo, ".cache", "agentbox")}
	g, err = preparePushGuard(o, inside, []string{repo})
	if err != nil {
		t.Fatal(err)
	}
	defer g.cleanup()
	if g.staged == nil || !strings.HasPrefix(g.ops[2].Source, "/tmp/"+pushguard.GuardStagePrefix) {
		t.Errorf("cache inside the repository was used: %+v", g.ops)
	}
	if left, _ := filepath.Glob(filepath.Join(repo, ".cache", "agentbox", "pushguard", "*")); len(left) != 0 {
		t.Errorf("wrote %v inside the repository", left)
	}
}
