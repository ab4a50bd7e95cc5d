// Package testenv gives tests what they need to run agentbox as a user runs it: the
// real binary, built once per test process, and an unprivileged user to run it as.
//
// When the tests run as root (as CI does), commands run as the user named by
// $AGENTBOX_TEST_USER (default "agentbox-test", created by scripts/setup-test-env.sh).
// The binary and every temp dir live below a world-traversable directory, because
// CI's clone may sit where only root can enter.
package testenv

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// DefaultUser is the unprivileged account tests use when they run as root.
const DefaultUser = "agentbox-test"

// User is the account commands run as.
type User struct {
	Name     string
	UID, GID uint32
	Root     bool // the tests themselves run as root and drop to this user
}

var (
	userOnce sync.Once
	theUser  User
	userErr  error

	baseOnce sync.Once
	baseDir  string
	baseErr  error

	binMu    sync.Mutex
	binPaths = map[string]string{} // package → built binary
)

// TestUser returns the unprivileged user. When the tests run as root and the user is
// missing, that is a set-up fault and fails the test — except under -short, the tier
// for a machine without the test setup, where the test skips naming the user (Skip:
// still a failure under EnvStrict).
func TestUser(t testing.TB) User {
	t.Helper()
	userOnce.Do(func() {
		if os.Geteuid() != 0 {
			u, err := user.Current()
			if err != nil {
				userErr = err
				return
			}
			theUser = User{Name: u.Username, UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}
			return
		}
		name := os.Getenv("AGENTBOX_TEST_USER")
		if name == "" {
			name = DefaultUser
		}
		u, err := user.Lookup(name)
		if err != nil {
			userErr = fmt.Errorf("tests run as root and need the unprivileged user %q (run scripts/setup-test-env.sh): %v", name, err)
			return
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		theUser = User{Name: name, UID: uint32(uid), GID: uint32(gid), Root: true}
	})
	if userErr != nil {
		if testing.Short() {
			Skip(t, "%v", userErr)
		}
		t.Fatal(userErr)
	}
	return theUser
}

// SetupFile returns path, a file scripts/setup-test-env.sh provides (what names it),
// failing the test when it is missing — except under -short, where the test skips
// naming the file (Skip: still a failure under EnvStrict).
func SetupFile(t testing.TB, path, what string) string {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		if testing.Short() {
			Skip(t, "needs %s at %s (run scripts/setup-test-env.sh as root): %v", what, path, err)
		}
		t.Fatalf("%s missing (run scripts/setup-test-env.sh as root): %v", what, err)
	}
	return path
}

// base is a directory below /tmp, reachable by every user, holding the binary and the
// per-test directories of this test process.
func base(t testing.TB) string {
	t.Helper()
	baseOnce.Do(func() {
		baseDir, baseErr = os.MkdirTemp("/var/tmp", "agentbox-test-")
		if baseErr == nil {
			baseErr = os.Chmod(baseDir, 0o755)
		}
	})
	if baseErr != nil {
		t.Fatal(baseErr)
	}
	return baseDir
}

// Cleanup removes the shared directory; call it from TestMain after m.Run.
func Cleanup() {
	if baseDir != "" {
		_ = os.RemoveAll(baseDir)
	}
}

// ModuleRoot returns the directory holding go.mod, three levels above this file
// (internal/testkit/testenv).
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(file))))
}

// Binary builds cmd/agentbox once per test process (CGO_ENABLED=0, as shipped; with
// -race and CGO_ENABLED=1 when this test binary has the race detector: RaceBuild) and
// returns its path, readable and executable by the test user. $AGENTBOX_BINARY, when
// set, is used instead.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("AGENTBOX_BINARY"); p != "" {
		return p
	}
	return Program(t, "./cmd/agentbox", "agentbox")
}

// Program builds the main package pkg (a path below the module root) once per test
// process, as Binary builds agentbox, into a file called name, and returns its path.
func Program(t testing.TB, pkg, name string) string {
	t.Helper()
	dir := base(t)
	binMu.Lock()
	defer binMu.Unlock()
	if p, ok := binPaths[pkg]; ok {
		return p
	}
	path := filepath.Join(dir, name)
	args, cgo := []string{"build", "-buildvcs=false"}, "CGO_ENABLED=0"
	if RaceBuild {
		args, cgo = append(args, "-race"), "CGO_ENABLED=1"
	}
	cmd := exec.Command("go", append(args, "-o", path, pkg)...)
	cmd.Dir = ModuleRoot()
	cmd.Env = append(os.Environ(), cgo)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	binPaths[pkg] = path
	return path
}

// Dir creates a fresh directory owned by the test user (mode 0755) and removes it
// when the test ends. Paths are canonical (no symlinks).
func Dir(t testing.TB, name string) string {
	t.Helper()
	u := TestUser(t)
	d, err := os.MkdirTemp(base(t), strings.ReplaceAll(name, "/", "_")+"-")
	if err != nil {
		t.Fatal(err)
	}
	d, _ = filepath.EvalSymlinks(d)
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	Chown(t, d)
	t.Cleanup(func() { removeAll(d) })
	_ = u
	return d
}

// removeAll removes a tree even where a test made parts of it read-only.
func removeAll(d string) {
	_ = filepath.Walk(d, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	_ = os.RemoveAll(d)
}

// Chown gives path and everything below it to the test user (no-op when not root).
func Chown(t testing.TB, path string) {
	t.Helper()
	u := TestUser(t)
	if !u.Root {
		return
	}
	err := filepath.Walk(path, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(u.UID), int(u.GID))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Command returns a command that runs as the test user with a minimal, predictable
// environment: HOME=home, PATH, LANG, USER.
func Command(t testing.TB, home string, name string, args ...string) *exec.Cmd {
	t.Helper()
	u := TestUser(t)
	cmd := exec.Command(name, args...)
	// The test's own directory may sit in a clone only root can enter (as in CI):
	// start in HOME unless the caller says otherwise.
	cmd.Dir = home
	cmd.Env = []string{
		"HOME=" + home,
		"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
		"USER=" + u.Name,
		"LANG=C.UTF-8",
		"SHELL=/bin/sh",
	}
	if v := os.Getenv(EnvStrict); v != "" {
		cmd.Env = append(cmd.Env, EnvStrict+"="+v)
	}
	if v := os.Getenv("AGENTBOX_BWRAP"); v != "" {
		cmd.Env = append(cmd.Env, "AGENTBOX_BWRAP="+v)
	}
	// Always set, so that callers can add to it (Pdeathsig, Setpgid) when the tests
	// run as the ordinary user, who needs no credentials switched.
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if u.Root {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: []uint32{}}
	}
	return cmd
}

// Git runs git as the test user in dir and fails the test on error.
func Git(t testing.TB, home, dir string, args ...string) string {
	t.Helper()
	cmd := Command(t, home, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(cmd.Env,
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid",
		"GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

// envRerun marks a test binary re-run as the test user by AsTestUser.
const envRerun = "_AGENTBOX_TEST_RERUN"

// AsTestUser reports whether the calling test should run its body in this process.
// Run as root (as CI does), it re-runs just this test, from a copy of the test binary,
// as the unprivileged test user — for what root would get wrong: reading mode-000
// files, creating user namespaces as an ordinary user — reports that run's result
// as this test's, and returns false. The re-run's environment is Command's plus
// extraEnv.
func AsTestUser(t *testing.T, extraEnv ...string) bool {
	t.Helper()
	if os.Geteuid() != 0 || os.Getenv(envRerun) != "" {
		return true
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := Dir(t, "bin")
	bin := filepath.Join(dir, filepath.Base(self))
	if err := copyExecutable(self, bin); err != nil {
		t.Fatal(err)
	}
	home := Dir(t, "home")
	cmd := Command(t, home, bin, "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(append(cmd.Env, envRerun+"=1"), extraEnv...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("as the test user: %v\n%s", err, out)
	}
	return false
}

func copyExecutable(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// EnvStrict, set by the project's test command (scripts/test.sh), makes Skip fail:
// there every tool and privilege a test can want is installed, so a skip would only
// hide a missing feature behind a green run.
const EnvStrict = "AGENTBOX_TEST_STRICT"

// Skip skips the test for a missing tool or privilege — or, under EnvStrict, fails it.
func Skip(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv(EnvStrict) != "" {
		t.Fatalf("%s is set, and this test would skip: "+format, append([]any{EnvStrict}, args...)...)
	}
	t.Skipf(format, args...)
}

// KernelGate starts the reason SkipKernel gives: "kernel lacks FEATURE: why". The
// kernel matrix's host side parses it (vmproto.KernelGate, which kmatrix's tests
// keep equal to this): the test helpers do not link kmatrix's protocol.
const KernelGate = "kernel lacks "

// SkipKernel skips a test that needs a kernel feature (one of doctor's check names,
// internal/kernel's constants) this kernel lacks. Inside the kernel matrix's VMs
// (AGENTBOX_KMATRIX set) it is the one skip allowed under EnvStrict, and it is not
// taken on trust: kmatrix reads the feature from the reason and fails the cell unless
// doctor, in the same VM, measured that feature missing. Elsewhere it is Skip: CI's
// own kernel has every feature a gated test needs.
func SkipKernel(t testing.TB, feature, format string, args ...any) {
	t.Helper()
	if os.Getenv("AGENTBOX_KMATRIX") == "" {
		Skip(t, KernelGate+feature+": "+format, args...)
		return
	}
	t.Skipf(KernelGate+feature+": "+format, args...)
}

// CanonTempDir is t.TempDir() with its symlinks resolved ($TMPDIR may be a symlink),
// for tests that compare paths the code canonicalises.
func CanonTempDir(t testing.TB) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// DirNames lists dir's entry names, sorted; it fails the test when dir cannot be
// read. Tests compare a directory before and after with it.
func DirNames(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// LocalGit runs git in dir as the running user, with no system or global config and
// a fixed identity, for fixtures the test process itself owns; it fails the test on
// error and returns the trimmed output.
func LocalGit(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid",
		"GIT_ALLOW_PROTOCOL=file")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

// ServeUnix listens on the Unix socket addr ("@name": abstract), as a host daemon
// would, and answers every connection with reply. A path socket is made connectable
// by everyone (mode 0777); the listener is closed, and the path removed, when the
// test ends.
func ServeUnix(t testing.TB, addr, reply string) {
	t.Helper()
	l, err := net.Listen("unix", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	path := !strings.HasPrefix(addr, "@")
	if path {
		_ = os.Chmod(addr, 0o777)
	}
	t.Cleanup(func() {
		l.Close()
		if path {
			os.Remove(addr)
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(reply))
			c.Close()
		}
	}()
}

// OtherUser is the second unprivileged account (scripts/setup-test-env.sh): another
// local user of the same host, never the operator, whom attacks from outside a
// session run as.
const OtherUser = "agentbox-other"

// OtherCommand returns a command that runs as OtherUser, with HOME its own and the
// environment Command gives. It needs the tests to run as root (as CI does); a run as
// an ordinary user cannot switch to another user, and the test skips saying so
// (Skip: still a failure under EnvStrict).
func OtherCommand(t testing.TB, name string, args ...string) *exec.Cmd {
	t.Helper()
	if os.Geteuid() != 0 {
		Skip(t, "needs root to run as %s", OtherUser)
	}
	u, err := user.Lookup(OtherUser)
	if err != nil {
		t.Fatalf("the second test user %q is missing (run scripts/setup-test-env.sh): %v", OtherUser, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	cmd := exec.Command(name, args...)
	cmd.Dir = "/"
	cmd.Env = []string{"HOME=" + u.HomeDir, "PATH=/usr/local/bin:/usr/bin:/bin", "USER=" + OtherUser, "LANG=C.UTF-8"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	return cmd
}
