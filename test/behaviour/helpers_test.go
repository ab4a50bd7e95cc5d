package behaviour

import (
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
)

// The fixture lives in internal/testkit/sandboxtest, shared with test/adversarial. These
// lower-case adapters keep the rows of this package short and unchanged.

var (
	sigTERM os.Signal = syscall.SIGTERM
	sigINT  os.Signal = syscall.SIGINT
	sigHUP  os.Signal = syscall.SIGHUP
	sigUSR1 os.Signal = syscall.SIGUSR1
	sigQUIT os.Signal = syscall.SIGQUIT
)

// box is one sandbox test fixture (sandboxtest.Box): a fresh HOME with a Git
// repository inside it, owned by the unprivileged test user, and the backend.
type box struct {
	t       *testing.T
	backend string
	bin     string
	home    string
	repo    string
}

func newBox(t *testing.T, backend string) *box {
	t.Helper()
	x := sandboxtest.NewBox(t, backend)
	return &box{t: t, backend: x.Backend, bin: x.Bin, home: x.Home, repo: x.Repo}
}

func (b *box) fixture() *sandboxtest.Box {
	return &sandboxtest.Box{T: b.t, Backend: b.backend, Bin: b.bin, Home: b.home, Repo: b.repo}
}

// result is how one agentbox invocation ended.
type result struct {
	stdout, stderr string
	code           int
}

func fromResult(r sandboxtest.Result) result {
	return result{stdout: r.Stdout, stderr: r.Stderr, code: r.Code}
}

func (r result) String() string {
	return sandboxtest.Result{Stdout: r.stdout, Stderr: r.stderr, Code: r.code}.String()
}

// command prepares `agentbox exec --backend B ARGS... -- sh -c SCRIPT` in dir.
func (b *box) command(dir string, args []string, script string) *exec.Cmd {
	return b.fixture().Command(dir, args, script)
}

func run(cmd *exec.Cmd) result { return fromResult(sandboxtest.Run(cmd)) }

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

// startAndCollect starts cmd and delivers its result on res when it ends.
func startAndCollect(cmd *exec.Cmd, res chan<- result) error {
	inner := make(chan sandboxtest.Result, 1)
	if err := sandboxtest.StartAndCollect(cmd, inner); err != nil {
		return err
	}
	go func() { res <- fromResult(<-inner) }()
	return nil
}

func backends(t *testing.T) []string      { return sandboxtest.Backends(t) }
func waitFor(cond func() bool) bool       { return sandboxtest.WaitFor(cond) }
func readFileOr(path string) string       { return sandboxtest.ReadFileOr(path) }
func pgrep(name string) []string          { return sandboxtest.Pgrep(name) }
func writeFile(t *testing.T, p, c string) { t.Helper(); sandboxtest.WriteFile(t, p, c) }
func readFile(t *testing.T, p string) string {
	t.Helper()
	return sandboxtest.ReadFile(t, p)
}
func exists(path string) bool { return sandboxtest.Exists(path) }
