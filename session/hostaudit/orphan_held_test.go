package hostaudit

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/policy"
)

// TestOrphanAuditChecksIdentity: a killed launcher's audit, run by the next
// launch, reads the repository only if what lies at its path is the directory
// that session wrote. One moved away, or replaced by another (a fresh clone
// whose own config runs a program), is not audited by path: the wrong
// directory's files are never taken for plants and moved aside, and a line says
// what happened and what to do.
func TestOrphanAuditChecksIdentity(t *testing.T) {
	for _, row := range []struct{ name, want string }{
		{"same", "audited now: 1 finding(s)"},
		{"moved away", "cannot be opened now"},
		{"replaced", "is another directory now"},
	} {
		t.Run(row.name, func(t *testing.T) {
			top, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			repo := filepath.Join(top, "repo")
			if err := os.MkdirAll(filepath.Join(repo, ".git/hooks"), 0o755); err != nil {
				t.Fatal(err)
			}
			p := &policy.Policy{Repo: repo, StateDir: filepath.Join(top, "state")}
			var stderr bytes.Buffer
			cfg := &Config{Stderr: &stderr, NoRecord: true}
			a, err := Start(cfg, p, nil)
			if err != nil {
				t.Fatal(err)
			}
			// The launcher is killed: its lock and descriptors go, its journal stays.
			a.journal.Close()
			a.held.Close()
			config := filepath.Join(repo, ".git/config")
			switch row.name {
			case "same":
				writeTestFile(t, config, "[core]\n\tfsmonitor = touch /tmp/pwned\n")
			case "moved away", "replaced":
				if err := os.Rename(repo, repo+".moved"); err != nil {
					t.Fatal(err)
				}
			}
			if row.name == "replaced" {
				if err := os.MkdirAll(filepath.Join(repo, ".git"), 0o755); err != nil {
					t.Fatal(err)
				}
				writeTestFile(t, config, "[core]\n\tfsmonitor = the-users-own-monitor\n")
			}
			Orphans(cfg, p)
			if !strings.Contains(stderr.String(), row.want) {
				t.Errorf("want %q in:\n%s", row.want, stderr.String())
			}
			if _, err := os.Stat(a.journalPath); !os.IsNotExist(err) {
				t.Errorf("the pending audit stayed (%v): the next launch would say it again and inherit its baseline", err)
			}
			if row.name == "replaced" {
				if b, err := os.ReadFile(config); err != nil || !strings.Contains(string(b), "the-users-own-monitor") {
					t.Errorf("the new directory's own config was moved aside (%v):\n%s", err, stderr.String())
				}
			}
		})
	}
}

func writeTestFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestOrphanAuditWorktreeReplaced: a killed launcher's session ran in a linked
// worktree, which was removed and added again (a new directory at its path) before
// the next launch. Its working tree is not audited, but the common dir it wrote is
// still the main worktree's .git: its part of the audit runs, wherever the next
// launch is (the main worktree's, or the new worktree's), and one line says what was
// not audited. The new worktree's own files are left alone.
func TestOrphanAuditWorktreeReplaced(t *testing.T) {
	for _, next := range []string{"main", "worktree"} {
		t.Run(next, func(t *testing.T) {
			top, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			main, wt, outside := filepath.Join(top, "main"), filepath.Join(top, "wt"), filepath.Join(top, "outside")
			for _, d := range []string{main, outside} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			testenv.LocalGit(t, main, "init", "-q", "-b", "main")
			writeTestFile(t, filepath.Join(main, "f"), "x\n")
			testenv.LocalGit(t, main, "add", "f")
			testenv.LocalGit(t, main, "commit", "-q", "-m", "one")
			testenv.LocalGit(t, main, "worktree", "add", "-q", wt)
			common := filepath.Join(main, ".git")
			state := filepath.Join(top, "state")
			var stderr bytes.Buffer
			cfg := &Config{Stderr: &stderr, NoRecord: true}
			a, err := Start(cfg, &policy.Policy{Repo: wt, StateDir: state}, []string{filepath.Join(common, "worktrees/wt"), common})
			if err != nil {
				t.Fatal(err)
			}
			// The session plants in the common dir; its launcher is killed.
			refLink := filepath.Join(common, "refs/heads/out")
			if err := os.Symlink(outside, refLink); err != nil {
				t.Fatal(err)
			}
			module := filepath.Join(common, "modules/m/config")
			if err := os.MkdirAll(filepath.Dir(module), 0o755); err != nil {
				t.Fatal(err)
			}
			writeTestFile(t, module, "[core]\n\tfsmonitor = touch /tmp/pwned\n")
			a.journal.Close()
			a.held.Close()
			closeAll(a.heldGitDirs)
			testenv.LocalGit(t, main, "worktree", "remove", "--force", wt)
			testenv.LocalGit(t, main, "worktree", "add", "-q", wt)
			repo := main
			if next == "worktree" {
				repo = wt
			}
			Orphans(cfg, &policy.Policy{Repo: repo, StateDir: state})
			out := stderr.String()
			if !strings.Contains(out, "audited now only its Git directories") || !strings.Contains(out, "not its working tree") {
				t.Errorf("no line saying what was audited and what not:\n%s", out)
			}
			for _, p := range []string{refLink, module} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s: the plant in the common dir was left:\n%s", p, out)
				}
			}
			if _, err := os.Stat(a.journalPath); !os.IsNotExist(err) {
				t.Errorf("the pending audit stayed (%v)", err)
			}
			testenv.LocalGit(t, wt, "status", "--short") // the new worktree still works
		})
	}
}
