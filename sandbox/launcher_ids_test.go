package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// envLauncherIDsChild runs TestLauncherAfterTheProgramDroppedRoot's program.
const envLauncherIDsChild = "_AGENTBOX_TEST_LAUNCHER_IDS_CHILD"

// TestLauncherAfterTheProgramDroppedRoot: a program started as root that makes its
// Launcher early (as docs/api.md advises) and then drops to a user gets no sandbox
// with the host's uid 0. Its session's plan is prepared for the user (no cover of
// a root session: mounts.Session.HostRoot false) while the helper, still root,
// mapped its own uid 0 to the command; on main the command ran as the host's root.
// Launcher.Run refuses instead, naming why, as a spare of another uid is discarded.
func TestLauncherAfterTheProgramDroppedRoot(t *testing.T) {
	if os.Getenv(envLauncherIDsChild) != "" {
		launcherIDsChild(t)
		return
	}
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root: the program drops from root to the test user")
	}
	u := testenv.TestUser(t)
	home := testenv.Dir(t, "home")
	repo := testenv.Dir(t, "repo")
	if out, err := testenv.Command(t, home, "git", "init", "-q", repo).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Dir = home
	cmd.Env = []string{"HOME=" + home, "PATH=/usr/local/bin:/usr/bin:/bin", envLauncherIDsChild + "=1",
		"TEST_REPO=" + repo, "TEST_UID=" + strconv.Itoa(int(u.UID)), "TEST_GID=" + strconv.Itoa(int(u.GID))}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("the program that dropped root: %v\n%s", err, out)
	}
}

// launcherIDsChild is the program: root, it starts a Launcher, drops to the test
// user, and launches.
func launcherIDsChild(t *testing.T) {
	uid, _ := strconv.Atoi(os.Getenv("TEST_UID"))
	gid, _ := strconv.Atoi(os.Getenv("TEST_GID"))
	repo := os.Getenv("TEST_REPO")
	l, err := NewLauncher("")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := syscall.Setgroups(nil); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setgid(gid); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setuid(uid); err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(filepath.Join(os.Getenv("HOME"), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	// AllowGitPush: the push guard's binary lies in the user's cache, which the
	// helper's init, root with only uid 0 mapped, cannot open.
	res, err := l.Run(Options{Command: []string{"id", "-u"}, Repo: repo, Dir: repo, Stdout: out, NoRecord: true, AllowGitPush: true, Log: &strings.Builder{}})
	got, _ := os.ReadFile(out.Name())
	if err == nil {
		t.Fatalf("Launcher.Run after the program dropped root ran the command (status %d, uid inside %q), want refused", res.Status, strings.TrimSpace(string(got)))
	}
	if !strings.Contains(err.Error(), "uid") {
		t.Errorf("refused with %q, want the words naming the uid it was started with", err)
	}
	if len(got) > 0 {
		t.Errorf("the command ran (uid inside %q)", got)
	}
}
