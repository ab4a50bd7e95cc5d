package gitguard

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// linkedFixture makes DIR/main (one commit) and its linked worktree DIR/wt.
func linkedFixture(t *testing.T) (mainRepo, wt string) {
	t.Helper()
	dir := testenv.CanonTempDir(t)
	mainRepo, wt = filepath.Join(dir, "main"), filepath.Join(dir, "wt")
	if err := os.Mkdir(mainRepo, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.LocalGit(t, mainRepo, "init", "-q")
	testenv.LocalGit(t, mainRepo, "commit", "-q", "--allow-empty", "-m", "first")
	testenv.LocalGit(t, mainRepo, "worktree", "add", "-q", "-b", "topic", wt)
	return mainRepo, wt
}

func TestFindLinkedWorktree(t *testing.T) {
	mainRepo, wt := linkedFixture(t)
	common := filepath.Join(mainRepo, ".git")
	w, err := FindLinkedWorktree(wt)
	if err != nil || w == nil {
		t.Fatalf("FindLinkedWorktree: %+v %v", w, err)
	}
	if w.CommonDir != common || w.GitDir != filepath.Join(common, "worktrees", "wt") {
		t.Fatalf("got %+v", w)
	}
	want := []string{filepath.Join(common, "HEAD"), filepath.Join(common, "index")}
	if strings.Join(w.ReadOnly, " ") != strings.Join(want, " ") {
		t.Fatalf("ReadOnly %v, want %v", w.ReadOnly, want)
	}

	// Not linked worktrees: the main repository, a plain directory, a gitdir file
	// naming a gitdir without commondir (a submodule checkout).
	plain := testenv.CanonTempDir(t)
	sub := testenv.CanonTempDir(t)
	if err := os.WriteFile(filepath.Join(sub, ".git"), []byte("gitdir: "+common+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{mainRepo, plain, sub} {
		if w, err := FindLinkedWorktree(dir); w != nil || err != nil {
			t.Errorf("%s: %+v %v, want nothing", dir, w, err)
		}
	}
}

func TestFindLinkedWorktreeRelativePointers(t *testing.T) {
	mainRepo, wt := linkedFixture(t)
	gitdir := filepath.Join(mainRepo, ".git", "worktrees", "wt")
	// Git 2.48's worktree.useRelativePaths writes relative pointers.
	if err := os.WriteFile(filepath.Join(wt, ".git"), []byte("gitdir: ../main/.git/worktrees/wt\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(gitdir, "gitdir"), []byte("../../../../wt/.git\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := FindLinkedWorktree(wt)
	if err != nil || w == nil || w.GitDir != gitdir || w.CommonDir != filepath.Join(mainRepo, ".git") {
		t.Fatalf("relative pointers: %+v %v", w, err)
	}
}

// TestFindLinkedWorktreeUntrusted: repo/.git is writable by every earlier session, so
// a forged one must never get a directory of its choice bound writable.
func TestFindLinkedWorktreeUntrusted(t *testing.T) {
	cases := []struct {
		name  string
		forge func(t *testing.T, mainRepo, wt string)
	}{
		{"another worktree's gitdir (back pointer names it)", func(t *testing.T, mainRepo, wt string) {
			other := filepath.Join(filepath.Dir(wt), "other")
			testenv.LocalGit(t, mainRepo, "worktree", "add", "-q", "-b", "o", other)
			write(t, filepath.Join(wt, ".git"), "gitdir: "+filepath.Join(mainRepo, ".git/worktrees/other")+"\n")
		}},
		{"commondir elsewhere (a directory of the sandbox's choice)", func(t *testing.T, mainRepo, wt string) {
			target := filepath.Join(filepath.Dir(wt), "victim")
			for _, d := range []string{"objects", "refs"} {
				if err := os.MkdirAll(filepath.Join(target, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			write(t, filepath.Join(target, "HEAD"), "ref: refs/heads/x\n")
			write(t, filepath.Join(mainRepo, ".git/worktrees/wt/commondir"), target+"\n")
		}},
		{"gitdir not below the common dir's worktrees/", func(t *testing.T, mainRepo, wt string) {
			fake := filepath.Join(wt, "fake")
			if err := os.MkdirAll(fake, 0o755); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(fake, "commondir"), filepath.Join(mainRepo, ".git")+"\n")
			write(t, filepath.Join(fake, "gitdir"), filepath.Join(wt, ".git")+"\n")
			write(t, filepath.Join(wt, ".git"), "gitdir: "+fake+"\n")
		}},
		{"common dir that is not a gitdir", func(t *testing.T, mainRepo, wt string) {
			if err := os.RemoveAll(filepath.Join(mainRepo, ".git/objects")); err != nil {
				t.Fatal(err)
			}
		}},
		{"worktrees/ reached through a symlink", func(t *testing.T, mainRepo, wt string) {
			real := filepath.Join(filepath.Dir(wt), "wtmeta")
			if err := os.Rename(filepath.Join(mainRepo, ".git/worktrees"), real); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(real, filepath.Join(mainRepo, ".git/worktrees")); err != nil {
				t.Fatal(err)
			}
		}},
		{"gitdir pointer moved away (stale)", func(t *testing.T, mainRepo, wt string) {
			write(t, filepath.Join(mainRepo, ".git/worktrees/wt/gitdir"), "/nonexistent/wt/.git\n")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mainRepo, wt := linkedFixture(t)
			c.forge(t, mainRepo, wt)
			w, err := FindLinkedWorktree(wt)
			if w != nil || !errors.Is(err, ErrWorktreeUnverified) {
				t.Fatalf("got %+v, %v; want ErrWorktreeUnverified", w, err)
			}
			if !strings.Contains(err.Error(), wt+"/.git") {
				t.Errorf("message does not name the .git file: %v", err)
			}
		})
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestProtectedPathsLinkedWorktree: with the common dir as an extra writable root,
// its exec surface and the worktree gitdir's pointers are protected; hooks and config
// of the worktree gitdir, which Git never reads, get no placeholders.
func TestProtectedPathsLinkedWorktree(t *testing.T) {
	mainRepo, wt := linkedFixture(t)
	common := filepath.Join(mainRepo, ".git")
	gitdir := filepath.Join(common, "worktrees", "wt")

	// Without the extra root, nothing outside wt is listed: only wt's own .git
	// pointer file.
	got, err := ProtectedPaths(wt)
	if err != nil || paths(got) != filepath.Join(wt, ".git") {
		t.Fatalf("no extra root: %s %v", paths(got), err)
	}

	write(t, filepath.Join(common, "extra.inc"), "[core]\n")
	f, err := os.OpenFile(filepath.Join(common, "config"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("[include]\n\tpath = extra.inc\n[extensions]\n\tworktreeConfig = true\n")
	f.Close()
	got, err = ProtectedPaths(wt, common)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		filepath.Join(common, "config"),
		filepath.Join(common, "config.worktree") + " (missing)",
		filepath.Join(common, "extra.inc"),
		filepath.Join(common, "hooks"),
		filepath.Join(gitdir, "commondir"),
		filepath.Join(gitdir, "config.worktree") + " (missing)",
		filepath.Join(gitdir, "gitdir"),
		filepath.Join(wt, ".git"),
	}, "\n")
	if paths(got) != want {
		t.Fatalf("got:\n%s\nwant:\n%s", paths(got), want)
	}
}
