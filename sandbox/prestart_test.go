package sandbox

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// runCaptured runs script in a fresh repository with stdin from in and returns its
// combined output.
func runCaptured(t *testing.T, opts Options, in, script string) (Result, string) {
	t.Helper()
	repo := newRepo(t)
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	stdin, err := os.CreateTemp(t.TempDir(), "in")
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if _, err := stdin.WriteString(in); err != nil {
		t.Fatal(err)
	}
	if _, err := stdin.Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	opts.Command = []string{"/bin/sh", "-c", script}
	opts.Repo, opts.Dir = repo, repo
	opts.Stdin, opts.Stdout, opts.Stderr = stdin, out, out
	res, err := Run(opts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

func TestPrestartRunsInTheSpareAndRefills(t *testing.T) {
	if !asTestUser(t) {
		return
	}
	// A spare is discarded when the host's mount table changes (Usable), which
	// tests running beside this one do: such a launch may go fresh, and is tried
	// again. The watch is opened before the first spare starts, so every change
	// that can discard one is seen.
	mounts, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer mounts.Close()
	mountsChanged := func() bool {
		fds := []unix.PollFd{{Fd: int32(mounts.Fd()), Events: unix.POLLPRI}}
		n, err := unix.Poll(fds, 0)
		return err == nil && n > 0
	}
	if err := Prestart(Options{}); err != nil {
		t.Fatal(err)
	}
	defer StopPrestart()
	// Each launch gets its own streams (they travel with the plan), its own status,
	// and a fresh PID namespace; the second proves the spare was refilled.
	for i, word := range []string{"first", "second", "third"} {
		res, out := runCaptured(t, Options{}, word+"\n", `read w; echo "got $w"; set -- /proc/[0-9]*; echo $#; exit 3`)
		for try := 0; !res.Prestarted && try < 5 && mountsChanged(); try++ {
			res, out = runCaptured(t, Options{}, word+"\n", `read w; echo "got $w"; set -- /proc/[0-9]*; echo $#; exit 3`)
		}
		if !res.Prestarted {
			t.Errorf("launch %d did not use the prestarted init (the host's mount table changed meanwhile: %v)", i, mountsChanged())
		}
		if res.Status != 3 {
			t.Errorf("launch %d: status %d, want 3", i, res.Status)
		}
		// A fresh PID namespace holds the init and sh. (The shell counts by itself:
		// a pipeline's ls could list /proc before its grep is forked.)
		if want := "got " + word + "\n2\n"; out != want {
			t.Errorf("launch %d: output %q, want %q", i, out, want)
		}
	}
}

func TestPrestartMismatchLaunchesFresh(t *testing.T) {
	if !asTestUser(t) {
		return
	}
	if err := Prestart(Options{}); err != nil {
		t.Fatal(err)
	}
	defer StopPrestart()
	// The spare has the host network; an offline launch must not use it.
	// /proc/net/dev is the reader's network namespace (/sys/class/net is the host's
	// sysfs, bound read-only).
	res, out := runCaptured(t, Options{Offline: true}, "", `tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '`)
	if res.Prestarted {
		t.Error("an offline launch used a spare started without a network namespace")
	}
	if strings.TrimSpace(out) != "lo" {
		t.Errorf("offline launch sees interfaces %q, want only lo", out)
	}
	res, _ = runCaptured(t, Options{}, "", "true")
	if !res.Prestarted {
		t.Error("the launch after the mismatch found no refilled spare")
	}
}

// A spare copied the host's mount table when it started; after a change it must not
// be used (it could miss the new mount).
func TestPrestartDiscardedAfterMountChange(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "changing the host mount table needs root (CI runs as root)")
	}
	if err := Prestart(Options{}); err != nil {
		t.Fatal(err)
	}
	defer StopPrestart()
	res, _ := runCaptured(t, Options{}, "", "true")
	if !res.Prestarted {
		t.Fatal("first launch did not use the spare")
	}
	// Not below /tmp, which the sandbox replaces with its own.
	mnt, err := os.MkdirTemp("/var/tmp", "agentbox-prestart-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(mnt)
	// Wait for the refilled spare before changing the mount table.
	spares.Lock()
	pending := spares.next
	spares.Unlock()
	if pending == nil {
		t.Fatal("no spare refilled")
	}
	<-pending.done
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(mnt, unix.MNT_DETACH)
	if err := os.WriteFile(mnt+"/new-mount", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, out := runCaptured(t, Options{}, "", "cat "+mnt+"/new-mount")
	if res.Prestarted {
		t.Error("a spare started before a host mount was used after it")
	}
	if out != "x" {
		t.Errorf("the sandbox does not see the new host mount: %q", out)
	}
}

// TestNothingRunsAfterRun: Run returns once the command has exited and every process
// it left (in the background, in a new session) is gone, although it does not wait for
// the init's own exit; the calling program lives on, so nothing else would end them.
func TestNothingRunsAfterRun(t *testing.T) {
	if !asTestUser(t) {
		return
	}
	marker := "agentbox-api-leftover-" + strconv.Itoa(os.Getpid())
	res, _ := runCaptured(t, Options{}, "", sandboxtest.Leftovers(marker, 2)+"exit 4")
	if res.Status != 4 {
		t.Fatalf("status %d, want 4", res.Status)
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.HasPrefix(string(b), marker) {
			t.Errorf("process %s of the session still runs after Run returned: %q", e.Name(), b)
		}
	}
}

// TestPrestartSpareDiedLaunchesFresh: a spare that died while waiting (OOM killer, a
// stray kill) is noticed when the plan cannot be handed over, and the launch goes to a
// fresh init instead of failing.
func TestPrestartSpareDiedLaunchesFresh(t *testing.T) {
	if !asTestUser(t) {
		return
	}
	if err := Prestart(Options{}); err != nil {
		t.Fatal(err)
	}
	defer StopPrestart()
	spares.Lock()
	pending := spares.next
	spares.Unlock()
	<-pending.done
	if pending.p == nil {
		t.Fatal("no spare started")
	}
	pid := pending.p.PID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Dead (a zombie: its parent is this process) before the launch tries it.
	for i := 0; i < 500; i++ { // a bound against hangs, not a timing assertion
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && strings.HasPrefix(string(b[i+1:]), " Z") {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	res, out := runCaptured(t, Options{}, "", "echo fresh; exit 5")
	if res.Prestarted || res.Status != 5 || out != "fresh\n" {
		t.Errorf("after the spare died: prestarted %v, status %d, output %q; want a fresh launch, 5, %q", res.Prestarted, res.Status, out, "fresh\n")
	}
}
