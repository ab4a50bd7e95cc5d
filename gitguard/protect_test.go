package gitguard

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

func paths(ps []Protected) string {
	var out []string
	for _, p := range ps {
		s := p.Path
		if !p.Exists {
			s += " (missing)"
		}
		out = append(out, s)
	}
	return strings.Join(out, "\n")
}

func TestProtectedPathsStandardRepo(t *testing.T) {
	repo := testenv.CanonTempDir(t)
	testenv.LocalGit(t, repo, "init", "-q")
	got, err := ProtectedPaths(repo)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(repo, ".git/config") + "\n" + filepath.Join(repo, ".git/hooks")
	if paths(got) != want {
		t.Fatalf("got:\n%s\nwant:\n%s", paths(got), want)
	}
	// Not a Git work tree: nothing to protect.
	plain := testenv.CanonTempDir(t)
	if got, err := ProtectedPaths(plain); err != nil || len(got) != 0 {
		t.Fatalf("plain dir: %v %v", got, err)
	}
}

func TestProtectedPathsMissingAndWorktreeConfig(t *testing.T) {
	repo := testenv.CanonTempDir(t)
	testenv.LocalGit(t, repo, "init", "-q")
	os.RemoveAll(filepath.Join(repo, ".git/hooks"))
	f, _ := os.OpenFile(filepath.Join(repo, ".git/config"), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("[extensions]\n\tworktreeConfig = true\n")
	f.Close()
	mod := filepath.Join(repo, ".git/modules/a/b")
	os.MkdirAll(filepath.Join(mod, "hooks"), 0o755)
	os.WriteFile(filepath.Join(mod, "HEAD"), []byte("ref: refs/heads/main\n"), 0o644)
	os.WriteFile(filepath.Join(mod, "config"), []byte("[core]\n"), 0o644)
	got, err := ProtectedPaths(repo)
	if err != nil {
		t.Fatal(err)
	}
	// The submodule's own config does not enable worktreeConfig: Git reads no
	// config.worktree there, so none is protected.
	want := strings.Join([]string{
		filepath.Join(repo, ".git/config"),
		filepath.Join(repo, ".git/config.worktree") + " (missing)",
		filepath.Join(repo, ".git/hooks") + " (missing)",
		filepath.Join(mod, "config"),
		filepath.Join(mod, "hooks"),
	}, "\n")
	if paths(got) != want {
		t.Fatalf("got:\n%s\nwant:\n%s", paths(got), want)
	}
	if err := EnsurePlaceholders(got); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(repo, ".git/hooks")); err != nil || !fi.IsDir() {
		t.Fatalf("hooks placeholder: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(repo, ".git/config.worktree")); err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		t.Fatalf("config.worktree placeholder: %v", err)
	}
}

func TestProtectedPathsSymlinks(t *testing.T) {
	repo := testenv.CanonTempDir(t)
	outside := testenv.CanonTempDir(t)
	testenv.LocalGit(t, repo, "init", "-q")
	hooks := filepath.Join(repo, ".git/hooks")
	os.RemoveAll(hooks)

	// Any symlinked protected path is refused, wherever it points: the link itself
	// could be replaced from inside.
	os.Mkdir(filepath.Join(repo, "githooks"), 0o755)
	for _, target := range []string{outside, "../githooks", "../missing"} {
		os.Remove(hooks)
		os.Symlink(target, hooks)
		if _, err := ProtectedPaths(repo); err == nil || !strings.Contains(err.Error(), "is a symlink") {
			t.Fatalf("hooks -> %s: %v", target, err)
		}
	}
	// A placeholder is never created through a symlinked parent.
	os.Remove(hooks)
	evil := filepath.Join(repo, "evil")
	os.Symlink(outside, evil)
	err := EnsurePlaceholders([]Protected{{Path: filepath.Join(evil, "hooks"), Dir: true}})
	if err == nil {
		t.Fatal("placeholder created through a symlinked parent")
	}
	if _, err := os.Stat(filepath.Join(outside, "hooks")); err == nil {
		t.Fatal("directory created outside the repo")
	}
}

func TestProtectedPathsDotGitSymlinkAndFIFO(t *testing.T) {
	repo := testenv.CanonTempDir(t)
	testenv.LocalGit(t, repo, "init", "-q")
	// .git as a symlink to a gitdir inside the repo: Git uses it, so it is protected.
	if err := os.Rename(filepath.Join(repo, ".git"), filepath.Join(repo, "gitdir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("gitdir", filepath.Join(repo, ".git")); err != nil {
		t.Fatal(err)
	}
	got, err := ProtectedPaths(repo)
	if err != nil || !strings.Contains(paths(got), filepath.Join(repo, "gitdir/config")) ||
		!strings.Contains(paths(got), filepath.Join(repo, "gitdir/hooks")) {
		t.Fatalf("symlinked .git: %v\n%s", err, paths(got))
	}
	// A FIFO planted as commondir must not hang the launcher.
	if err := syscall.Mkfifo(filepath.Join(repo, "gitdir/commondir"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ProtectedPaths(repo); err != nil {
		t.Fatalf("FIFO commondir: %v", err)
	}
}

// TestProtectedPathsPlantedFIFOConfig: a session can leave a FIFO where a submodule's
// config should be; the next launch must not hang reading it.
func TestProtectedPathsPlantedFIFOConfig(t *testing.T) {
	repo := testenv.CanonTempDir(t)
	testenv.LocalGit(t, repo, "init", "-q")
	mod := filepath.Join(repo, ".git/modules/m")
	os.MkdirAll(mod, 0o755)
	os.WriteFile(filepath.Join(mod, "HEAD"), []byte("ref: refs/heads/main\n"), 0o644)
	if err := syscall.Mkfifo(filepath.Join(mod, "config"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := ProtectedPaths(repo); done <- err }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("ProtectedPaths blocked on a FIFO config")
	}
}
