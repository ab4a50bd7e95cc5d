package sandbox

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/grantledger"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

func TestMain(m *testing.M) {
	// The test binary is also the init and the launcher helper: it decides its role
	// first, as a program using the API does.
	Init()
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}

// asTestUser runs the calling test as the unprivileged test user when the tests run
// as root: the sandbox must work for an ordinary user.
func asTestUser(t *testing.T) bool {
	t.Helper()
	var extra []string
	if b := os.Getenv("AGENTBOX_BINARY"); b != "" {
		extra = append(extra, "AGENTBOX_BINARY="+b)
	}
	return testenv.AsTestUser(t, extra...)
}

// newRepo is a fresh Git repository owned by the running user.
func newRepo(t *testing.T) string {
	t.Helper()
	repo := t.TempDir()
	repo, _ = filepath.EvalSymlinks(repo)
	cmd := exec.Command("git", "init", "-q", repo)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	return repo
}

// launchers are the two ways to launch, tested alike.
func launchers(t *testing.T) map[string]func(Options) (Result, error) {
	l, err := NewLauncher("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return map[string]func(Options) (Result, error){"Run": Run, "Launcher": l.Run}
}

func TestRunRepoWritableHostReadOnlyHomeDisposable(t *testing.T) {
	if !asTestUser(t) {
		return
	}
	for name, run := range launchers(t) {
		t.Run(name, func(t *testing.T) {
			repo := newRepo(t)
			home := os.Getenv("HOME")
			marker := "sandbox-api-" + name
			out, err := os.CreateTemp(t.TempDir(), "out")
			if err != nil {
				t.Fatal(err)
			}
			script := `echo in-repo > "$1/written"
echo home > "$HOME/` + marker + `"
cat "$HOME/` + marker + `"
if (echo x > /etc/agentbox-api-test) 2>/dev/null; then echo etc-writable; fi
git -C "$1" config core.hooksPath /tmp/x 2>/dev/null && echo config-writable
exit 7`
			res, err := run(Options{
				Command: []string{"/bin/sh", "-c", script, "sh", repo},
				Repo:    repo, Dir: repo, Stdout: out, Stderr: out,
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != 7 {
				t.Errorf("status %d, want the command's 7", res.Status)
			}
			got, _ := os.ReadFile(out.Name())
			if strings.TrimSpace(string(got)) != "home" {
				t.Errorf("command output %q, want only %q (host /etc and .git/config must be read-only)", got, "home")
			}
			if b, err := os.ReadFile(filepath.Join(repo, "written")); err != nil || string(b) != "in-repo\n" {
				t.Errorf("write in the repository did not reach the host: %q, %v", b, err)
			}
			if _, err := os.Stat(filepath.Join(home, marker)); !os.IsNotExist(err) {
				t.Errorf("write in HOME reached the host (%v); HOME must be a disposable overlay", err)
			}
			if len(res.Phases) == 0 {
				t.Error("no setup phases reported")
			}
		})
	}
}

func TestRunSetupErrorNamesStep(t *testing.T) {
	if !asTestUser(t) {
		return
	}
	for name, run := range launchers(t) {
		t.Run(name, func(t *testing.T) {
			repo := newRepo(t)
			_, err := run(Options{Command: []string{"no-such-command-xyz"}, Repo: repo, Dir: repo})
			var se *SetupError
			if !errors.As(err, &se) {
				t.Fatalf("error %v (%T), want a *SetupError", err, err)
			}
			if !strings.Contains(se.Step, "no-such-command-xyz") {
				t.Errorf("step %q does not name the command", se.Step)
			}
		})
	}
}

func TestRunRefusesRepoThatIsHome(t *testing.T) {
	if !asTestUser(t) {
		return
	}
	home := os.Getenv("HOME")
	_, err := Run(Options{Command: []string{"true"}, Repo: home, Dir: home})
	if err == nil || !strings.Contains(err.Error(), "repo") {
		t.Fatalf("Run with the repository at $HOME: %v, want a refusal naming the repo", err)
	}
}

func TestRunWithInitBinary(t *testing.T) {
	bin := testenv.Binary(t) // built before switching users: the build needs root's cache
	if os.Getenv("AGENTBOX_BINARY") == "" {
		t.Setenv("AGENTBOX_BINARY", bin) // the re-run as the test user takes this one
	}
	if !asTestUser(t) {
		return
	}
	repo := newRepo(t)
	old := initCalled.Load()
	initCalled.Store(false) // as in a program that never called Init
	defer initCalled.Store(old)
	if _, err := Run(Options{Command: []string{"true"}, Repo: repo, Dir: repo}); !errors.Is(err, ErrNoInit) {
		t.Fatalf("Run without Init or InitBinary: %v, want ErrNoInit", err)
	}
	if _, err := NewLauncher(""); !errors.Is(err, ErrNoInit) {
		t.Fatalf("NewLauncher without Init: %v, want ErrNoInit", err)
	}
	res, err := Run(Options{Command: []string{"/bin/sh", "-c", "exit 3"}, Repo: repo, Dir: repo, InitBinary: bin})
	if err != nil || res.Status != 3 {
		t.Fatalf("Run with InitBinary %s: status %d, %v; want 3, nil", bin, res.Status, err)
	}
}

func TestLauncherClosed(t *testing.T) {
	if !asTestUser(t) {
		return
	}
	l, err := NewLauncher("")
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	repo := newRepo(t)
	if _, err := l.Run(Options{Command: []string{"true"}, Repo: repo, Dir: repo}); err == nil {
		t.Fatal("Run on a closed launcher succeeded")
	}
}

// TestLauncherRefusesWhatItCannotServe: a Launcher's helper hands the launcher no
// sockets of the init, so forwardings are refused instead of running a session
// without them. (Limits it serves: the session's cgroup goes to the helper.)
func TestLauncherRefusesWhatItCannotServe(t *testing.T) {
	l := &Launcher{}
	for name, opts := range map[string]Options{
		"HostPorts": {Offline: true, HostPorts: []PortMap{{Inside: 5432, Host: 5432}}},
		"Publish":   {Offline: true, Publish: []PortMap{{Inside: 8080, Host: 18080}}},
	} {
		if _, err := l.Run(opts); err == nil || !strings.Contains(err.Error(), "a Launcher cannot") {
			t.Errorf("%s through a Launcher: %v, want refused", name, err)
		}
	}
}

// An init binary a session could replace is refused before anything runs it: a
// relative path (exec would search PATH), one inside a Git working tree, by Prestart
// (whose spares run it before any plan) and NewLauncher as by Run.
func TestInitBinaryASessionCouldReplace(t *testing.T) {
	tree := t.TempDir()
	if err := os.Mkdir(filepath.Join(tree, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	inTree := filepath.Join(tree, "bin", "agentbox")
	if err := os.MkdirAll(filepath.Dir(inTree), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(inTree, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	defer StopPrestart()
	for _, bin := range []string{"bin/agentbox", inTree} {
		if err := Prestart(Options{InitBinary: bin}); err == nil || !strings.Contains(err.Error(), "InitBinary") {
			t.Errorf("Prestart with InitBinary %s: %v, want a refusal", bin, err)
		}
		if l, err := NewLauncher(bin); err == nil || !strings.Contains(err.Error(), "InitBinary") {
			if l != nil {
				l.Close()
			}
			t.Errorf("NewLauncher(%s): %v, want a refusal", bin, err)
		}
		if _, err := Plan(Options{Command: []string{"true"}, Repo: tree, Dir: tree, InitBinary: bin}); err == nil || !strings.Contains(err.Error(), "InitBinary") {
			t.Errorf("Plan with InitBinary %s: %v, want a refusal", bin, err)
		}
	}
}

// A link a session could replace anywhere on the way to the init binary redirects
// the next launch's exec as a replaced binary would: a link in a Git working tree
// between two links outside it (a file link and a directory link) is refused too.
func TestInitBinaryThroughALinkInATree(t *testing.T) {
	tree, out := t.TempDir(), t.TempDir()
	for _, d := range []string{filepath.Join(tree, ".git"), filepath.Join(out, "real"), filepath.Join(out, "bin")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	real := filepath.Join(out, "real", "agentbox")
	if err := os.WriteFile(real, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	links := [][2]string{
		{real, filepath.Join(tree, "agentbox")},
		{filepath.Join(tree, "agentbox"), filepath.Join(out, "bin", "agentbox")},
		{filepath.Join(out, "real"), filepath.Join(tree, "dir")},
		{filepath.Join(tree, "dir"), filepath.Join(out, "dirlink")},
	}
	for _, l := range links {
		if err := os.Symlink(l[0], l[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := checkInitBinary(real); err != nil {
		t.Fatalf("the binary itself, outside any tree: %v", err)
	}
	for _, bin := range []string{filepath.Join(out, "bin", "agentbox"), filepath.Join(out, "dirlink", "agentbox")} {
		if err := checkInitBinary(bin); err == nil || !strings.Contains(err.Error(), "InitBinary") {
			t.Errorf("InitBinary %s, through a link in the tree %s: %v, want a refusal", bin, tree, err)
		}
	}
}

// An init binary in a plain directory that an earlier session was given writable
// (its --add-dir, a kept path, a repository without .git) is refused by every door
// that opens it: that session could have put another program there.
func TestInitBinaryInAnEarlierGrant(t *testing.T) {
	tools := filepath.Join(t.TempDir(), "tools")
	bin := filepath.Join(tools, "agentbox")
	if err := os.MkdirAll(tools, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	f, err := openInitBinary(bin)
	if err != nil {
		t.Fatalf("before any grant: %v", err)
	}
	f.Close()
	if err := grantledger.Record(grantledger.StateDir(state, ""), []string{tools}); err != nil {
		t.Fatal(err)
	}
	if f, err := openInitBinary(bin); err == nil || !strings.Contains(err.Error(), "which a session can write") {
		if f != nil {
			f.Close()
		}
		t.Errorf("openInitBinary in an earlier grant: %v, want a refusal", err)
	}
	defer StopPrestart()
	if err := Prestart(Options{InitBinary: bin}); err == nil || !strings.Contains(err.Error(), "which a session can write") {
		t.Errorf("Prestart with InitBinary in an earlier grant: %v, want a refusal", err)
	}
	if l, err := NewLauncher(bin); err == nil || !strings.Contains(err.Error(), "which a session can write") {
		if l != nil {
			l.Close()
		}
		t.Errorf("NewLauncher(%s) in an earlier grant: %v, want a refusal", bin, err)
	}

	// Renamed, the directory is still the one granted (its identity is listed).
	renamed := tools + "-renamed"
	if err := os.Rename(tools, renamed); err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(renamed, "agentbox")
	if f, err := openInitBinary(moved); err == nil || !strings.Contains(err.Error(), "by that or another name") {
		if f != nil {
			f.Close()
		}
		t.Errorf("openInitBinary in an earlier grant renamed: %v, want a refusal", err)
	}
	// The session's link there to another program: the link is what it could
	// replace, wherever it leads.
	other := filepath.Join(t.TempDir(), "agentbox")
	if err := os.WriteFile(other, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, moved); err != nil {
		t.Fatal(err)
	}
	if f, err := openInitBinary(moved); err == nil || !strings.Contains(err.Error(), "by that or another name") {
		if f != nil {
			f.Close()
		}
		t.Errorf("openInitBinary through a link in an earlier grant renamed: %v, want a refusal", err)
	}
}
