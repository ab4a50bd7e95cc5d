// Package gitfixture makes the throwaway repositories that gitguard's packages test
// on: a fresh repository with one commit and a HOME of its own for the Git that built
// it, and helpers to write into it. It is imported by tests only.
package gitfixture

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// Fixture is a repository (Repo, one commit on main) and a HOME (Home), both in Root,
// a canonical temporary directory.
type Fixture struct {
	T    *testing.T
	Root string
	Home string
	Repo string
}

// New makes a fixture below t.TempDir().
func New(t *testing.T) *Fixture {
	t.Helper()
	root := testenv.CanonTempDir(t)
	f := &Fixture{T: t, Root: root, Home: filepath.Join(root, "home"), Repo: filepath.Join(root, "repo")}
	for _, d := range []string{f.Home, f.Repo} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f.Git(f.Repo, "init", "-q", "-b", "main")
	f.Write("README", "hello\n", 0o644)
	f.Git(f.Repo, "add", "README")
	f.Git(f.Repo, "commit", "-q", "-m", "first")
	return f
}

// Env isolates the Git that builds fixtures from the machine's config.
func Env(home string) []string {
	return []string{
		"HOME=" + home, "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid",
		"GIT_ALLOW_PROTOCOL=file",
	}
}

// Git runs git with Env(home) in dir, failing the test on error; it returns the
// trimmed output.
func Git(t *testing.T, home, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir, cmd.Env = dir, Env(home)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// Git runs git in dir with the fixture's HOME.
func (f *Fixture) Git(dir string, args ...string) string {
	f.T.Helper()
	return Git(f.T, f.Home, dir, args...)
}

// Write creates the repository-relative (or absolute) path with content and mode,
// making its parents.
func (f *Fixture) Write(rel, content string, mode os.FileMode) string {
	f.T.Helper()
	p := rel
	if !filepath.IsAbs(p) {
		p = filepath.Join(f.Repo, rel)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.T.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		f.T.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		f.T.Fatal(err)
	}
	return p
}

// GitdirAt makes the repository-relative dir look like a Git directory (HEAD,
// objects/, refs/).
func (f *Fixture) GitdirAt(rel string) string {
	f.T.Helper()
	d := filepath.Join(f.Repo, rel)
	for _, s := range []string{"objects", "refs/heads"} {
		if err := os.MkdirAll(filepath.Join(d, s), 0o755); err != nil {
			f.T.Fatal(err)
		}
	}
	f.Write(filepath.Join(d, "HEAD"), "ref: refs/heads/main\n", 0o644)
	return d
}
