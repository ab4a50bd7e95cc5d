package behaviour

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/agentbox/agentbox/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}

// backends lists the backends every row runs against. A backend that cannot keep a
// promise fails that row: nothing is skipped per backend.
func backends(t *testing.T) []string {
	list := []string{"native"}
	if bwrapPath(t) != "" {
		list = append(list, "bwrap")
	}
	return list
}

// bwrapPath is the bubblewrap 0.12.0 the bwrap rows run with: $AGENTBOX_BWRAP, else
// the build of scripts/setup-test-env.sh. In CI (CI=true) its absence fails the run.
func bwrapPath(t *testing.T) string {
	if p := os.Getenv("AGENTBOX_BWRAP"); p != "" {
		return p
	}
	const built = "/var/cache/agentbox-test/bwrap-0.12.0/bin/bwrap"
	if _, err := os.Stat(built); err == nil {
		return built
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("bubblewrap 0.12.0 missing at %s: run scripts/setup-test-env.sh", built)
	}
	return ""
}

// box is one sandbox test fixture: a fresh HOME and a fresh Git repository inside it,
// both owned by the unprivileged test user, and the backend under test.
type box struct {
	t       *testing.T
	backend string
	bin     string
	home    string
	repo    string
}

func newBox(t *testing.T, backend string) *box {
	t.Helper()
	home := testenv.Dir(t, "home")
	repo := filepath.Join(home, "repo")
	if err := os.Mkdir(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(home, ".profile"), "original profile\n")
	testenv.Chown(t, home)
	testenv.Git(t, home, repo, "init", "-q")
	writeFile(t, filepath.Join(repo, "README"), "hello\n")
	testenv.Chown(t, repo)
	return &box{t: t, backend: backend, bin: testenv.Binary(t), home: home, repo: repo}
}

// result is how one agentbox invocation ended.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return "exit " + strconv.Itoa(r.code) + "\nstdout:\n" + r.stdout + "\nstderr:\n" + r.stderr
}

// command prepares `agentbox exec --backend B ARGS... -- sh -c SCRIPT` in dir.
func (b *box) command(dir string, args []string, script string) *exec.Cmd {
	full := append([]string{"exec", "--backend", b.backend}, args...)
	if script != "" {
		full = append(full, "--", "/bin/sh", "-c", script)
	}
	cmd := testenv.Command(b.t, b.home, b.bin, full...)
	cmd.Dir = dir
	if b.backend == "bwrap" {
		cmd.Env = append(cmd.Env, "AGENTBOX_BWRAP="+bwrapPath(b.t))
	}
	cmd.Env = append(cmd.Env, "REPO="+b.repo,
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
	return cmd
}

func run(cmd *exec.Cmd) result {
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
		if code < 0 {
			code = 999
		}
	} else if err != nil {
		code = -1
		errb.WriteString(err.Error())
	}
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

// sh runs script in the sandbox (cwd: the repo) and returns the result.
func (b *box) sh(script string, args ...string) result {
	b.t.Helper()
	return run(b.command(b.repo, args, script))
}

// ok runs script and fails the test unless it exits 0.
func (b *box) ok(script string, args ...string) string {
	b.t.Helper()
	r := b.sh(script, args...)
	if r.code != 0 {
		b.t.Fatalf("sandboxed script failed:\n%s\nscript: %s", r, script)
	}
	return r.stdout
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
