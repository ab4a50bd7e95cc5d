// Package sandboxtest is the fixture shared by the suites that launch the real
// agentbox binary as the unprivileged test user (test/behaviour, test/adversarial):
// the backends to run against, a fresh HOME with a Git repository in it, and helpers
// to run a script in the sandbox and collect how it ended.
//
// It builds on internal/testenv (binary, user, directories) and adds nothing a test
// could not see from outside: every check goes through the real command line.
package sandboxtest

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// BuiltBwrap is where scripts/setup-test-env.sh builds bubblewrap 0.12.0.
const BuiltBwrap = "/var/cache/agentbox-test/bwrap-0.12.0/bin/bwrap"

// Backends lists the backends every row runs against. A backend that cannot keep a
// promise fails that row: nothing is skipped per backend.
func Backends(t testing.TB) []string {
	list := []string{"native"}
	if BwrapPath(t) != "" {
		list = append(list, "bwrap")
	}
	return list
}

// NativeGo is the native backend with its plan run by the re-executed Go init
// (AGENTBOX_INIT=go, session.EnvInit) where the raw init would run: the behaviour
// table runs both runners of the one compiled program (nsinit/program). The name
// is spelled out here: this package builds wherever compat's tests do, and session
// does not.
const NativeGo = "native-go"

// GoAPI is the native backend entered through the Go API instead of the CLI: the
// rows run GoDoor, a small program built against package sandbox, in agentbox exec's
// place. Both doors lead to the one session core; the table checks that they keep
// the same promises.
const GoAPI = "go-api"

// GoDoor builds the Go API's door (internal/testkit/sandboxtest/godoor) and returns its path.
func GoDoor(t testing.TB) string {
	t.Helper()
	return testenv.Program(t, "./internal/testkit/sandboxtest/godoor", "agentbox-godoor")
}

// BwrapPath is the bubblewrap 0.12.0 the bwrap rows run with: $AGENTBOX_BWRAP, else
// the build of scripts/setup-test-env.sh. Under the test command (AGENTBOX_TEST_STRICT,
// which scripts/test.sh sets) or in CI (CI=true) its absence fails the run instead of
// silently dropping the whole bwrap column.
func BwrapPath(t testing.TB) string {
	if p := os.Getenv("AGENTBOX_BWRAP"); p != "" {
		return p
	}
	if _, err := os.Stat(BuiltBwrap); err == nil {
		return BuiltBwrap
	}
	if os.Getenv(testenv.EnvStrict) != "" || os.Getenv("CI") != "" {
		t.Fatalf("bubblewrap 0.12.0 missing at %s: run scripts/setup-test-env.sh", BuiltBwrap)
	}
	return ""
}

// Box is one sandbox test fixture: a fresh HOME and a fresh Git repository inside it,
// both owned by the unprivileged test user, and the backend under test.
type Box struct {
	T       testing.TB
	Backend string
	Bin     string // the agentbox binary
	Home    string
	Repo    string // HOME/repo, a Git repository with one file, README
}

// NewBox makes the fixture; its directories are removed when the test ends.
func NewBox(t testing.TB, backend string) *Box {
	t.Helper()
	home := testenv.Dir(t, "home")
	repo := filepath.Join(home, "repo")
	if err := os.Mkdir(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	WriteFile(t, filepath.Join(home, ".profile"), "original profile\n")
	// As in a user's HOME: the launcher keeps its own state below these (on the host,
	// the pending-audit journal even with --no-record), and tests that compare HOME
	// before and after skip agentbox's dirs, not their parents.
	for _, d := range []string{".cache", ".local/state"} {
		if err := os.MkdirAll(filepath.Join(home, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Chown(t, home)
	testenv.Git(t, home, repo, "init", "-q")
	WriteFile(t, filepath.Join(repo, "README"), "hello\n")
	testenv.Chown(t, repo)
	return &Box{T: t, Backend: backend, Bin: testenv.Binary(t), Home: home, Repo: repo}
}

// Result is how one agentbox invocation ended. Code is 999 for a launcher killed by
// a signal and -1 when it could not be started.
type Result struct {
	Stdout, Stderr string
	Code           int
}

func (r Result) String() string {
	return "exit " + strconv.Itoa(r.Code) + "\nstdout:\n" + r.Stdout + "\nstderr:\n" + r.Stderr
}

// Command prepares `agentbox exec --backend B ARGS... -- /bin/sh -c SCRIPT` in dir,
// as the test user (for GoAPI, the same command line to GoDoor). An empty script
// leaves the command to ARGS.
func (b *Box) Command(dir string, args []string, script string) *exec.Cmd {
	backend := b.Backend
	if backend == NativeGo || backend == GoAPI {
		backend = "native"
	}
	full := append([]string{"exec", "--backend", backend}, args...)
	if script != "" {
		full = append(full, "--", "/bin/sh", "-c", script)
	}
	if b.Backend == GoAPI {
		return b.command(GoDoor(b.T), dir, full...)
	}
	return b.Agentbox(dir, full...)
}

// Agentbox prepares `agentbox ARGS...` in dir as the test user, with the box's
// bubblewrap and Git identity in its environment.
func (b *Box) Agentbox(dir string, args ...string) *exec.Cmd {
	return b.command(b.Bin, dir, args...)
}

func (b *Box) command(bin, dir string, args ...string) *exec.Cmd {
	cmd := testenv.Command(b.T, b.Home, bin, args...)
	cmd.Dir = dir
	switch b.Backend {
	case "bwrap":
		cmd.Env = append(cmd.Env, "AGENTBOX_BWRAP="+BwrapPath(b.T))
	case NativeGo:
		cmd.Env = append(cmd.Env, "AGENTBOX_INIT=go")
	}
	cmd.Env = append(cmd.Env, "REPO="+b.Repo,
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
	return cmd
}

// Run runs cmd to the end and returns how it ended.
func Run(cmd *exec.Cmd) Result {
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	return resultOf(cmd.Run(), &out, &errb)
}

// resultOf maps how a command ended to a Result: its status, 999 for death by a
// signal, -1 (and the error in Stderr) when it did not run.
func resultOf(err error, out, errb *bytes.Buffer) Result {
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
	return Result{Stdout: out.String(), Stderr: errb.String(), Code: code}
}

// Sh runs script in the sandbox (cwd: the repo) and returns the result.
func (b *Box) Sh(script string, args ...string) Result {
	b.T.Helper()
	return Run(b.Command(b.Repo, args, script))
}

// OK runs script and fails the test unless it exits 0; it returns stdout.
func (b *Box) OK(script string, args ...string) string {
	b.T.Helper()
	r := b.Sh(script, args...)
	if r.Code != 0 {
		b.T.Fatalf("sandboxed script failed:\n%s\nscript: %s", r, script)
	}
	return r.Stdout
}

// StartAndCollect starts cmd and delivers its result on res when it ends.
func StartAndCollect(cmd *exec.Cmd, res chan<- Result) error {
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { res <- resultOf(cmd.Wait(), &out, &errb) }()
	return nil
}

// WaitFor polls cond for up to a minute: a bound against hangs, not a timing
// assertion. A launch on a loaded CI machine (2 cores, load 10 and more) can take
// several seconds before the command does what cond waits for.
func WaitFor(cond func() bool) bool {
	return WaitForUpTo(time.Minute, cond)
}

// GoneBound bounds a wait for what the kernel does at once, such as a killed
// session's processes being gone: far above a loaded machine's scheduling delay,
// and no longer, so that a session that outlives its launcher until something
// else ends it still fails the check.
const GoneBound = 10 * time.Second

// WaitForUpTo polls cond every 20 ms until it holds or d has passed.
func WaitForUpTo(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cond()
}

// Pgrep lists host PIDs whose argv[0] is name.
func Pgrep(name string) []string {
	var pids []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if arg0, _, _ := strings.Cut(string(b), "\x00"); arg0 == name {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// WriteFile writes content (mode 0644) or fails the test.
func WriteFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// ReadFile returns the file's content or fails the test.
func ReadFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// ReadFileOr returns the file's content, or "" when it cannot be read.
func ReadFileOr(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// Exists reports whether path exists (without following a final symlink).
func Exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// Leftovers is a shell snippet that starts n processes running as `sleep 300` with
// argv[0] marker, the first in the background and the rest also in a new session,
// and returns only once each of them runs under that name: a test that then checks
// the processes were killed proves something, which a fixed sleep before going on
// does not.
func Leftovers(marker string, n int) string {
	var b strings.Builder
	b.WriteString("_pids=''; ")
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString("setsid ")
		}
		b.WriteString("bash -c 'exec -a " + marker + " sleep 300' & _pids=\"$_pids $!\"; ")
	}
	b.WriteString(`for _p in $_pids; do until [ "$(tr '\0' '\n' < /proc/$_p/cmdline 2>/dev/null | head -n 1)" = ` + marker + ` ]; do sleep 0.01; done; done; `)
	return b.String()
}
