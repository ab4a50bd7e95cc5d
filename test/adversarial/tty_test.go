package adversarial

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// openPty opens a pseudo-terminal pair with /dev/ptmx and the TIOCSPTLCK/TIOCGPTN
// ioctls (devpts sets the slave's owner itself, so there is no grantpt step).
func openPty(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		testenv.Skip(t, "no pseudo-terminals here: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetUint32(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	// Opened as a plain descriptor: os.OpenFile would put the shared open file
	// description in non-blocking mode, which a test of what the command leaves
	// on the terminal reads.
	sfd, err := unix.Open("/dev/pts/"+strconv.Itoa(int(n)), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open slave: %v", err)
	}
	return m, os.NewFile(uintptr(sfd), "pty slave")
}

// startOnPty starts cmd with slave as its controlling terminal and standard
// streams; what it writes is copied from master into out, and done is closed when
// the copier ends (at EIO, once the last slave descriptor is closed).
func startOnPty(t *testing.T, cmd *exec.Cmd, master, slave *os.File) (out *bytes.Buffer, done chan struct{}) {
	t.Helper()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, true, 0
	out, done = &bytes.Buffer{}, make(chan struct{})
	go func() { _, _ = io.Copy(out, master); close(done) }()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return out, done
}

// TestTIOCSTI: the command runs with the caller's terminal as its controlling
// terminal (as when a user starts agentbox from an interactive shell) and pushes a
// command line into the terminal's input queue with TIOCSTI. Whatever the kernel
// allows (legacy_tiocsti), nothing may reach the queue: the caller's shell would read
// and run it after agentbox exits. The native backend refuses the ioctl with a
// seccomp filter; a backend may instead detach the command from the terminal
// (bwrap --new-session).
const tiocstiScript = `perl -e 'for my $c (split //, "echo INJECTED-BY-SANDBOX\n") {
	ioctl(STDIN, 0x5412, $c) or do { print "TIOCSTI refused errno ", $!+0, "\n"; exit 0 } }
	print "TIOCSTI accepted\n"'
perl -e 'my $c = "x"; ioctl(STDERR, 0x5412, $c) or print "TIOCSTI via fd 2 refused errno ", $!+0, "\n"'`

// onTerminal runs cmd with a fresh pseudo-terminal as its controlling terminal and
// standard streams, and returns what it wrote and what is left in the terminal's
// input queue afterwards: what the caller's shell would read next.
func onTerminal(t *testing.T, cmd *exec.Cmd) (output, injected string) {
	t.Helper()
	master, slave := openPty(t)
	defer master.Close()
	defer slave.Close()
	out, done := startOnPty(t, cmd, master, slave)
	err := cmd.Wait()
	// (Fd puts the file in blocking mode: take it once, then switch.)
	sfd := int(slave.Fd())
	if err := unix.SetNonblock(sfd, true); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	n, rerr := unix.Read(sfd, buf)
	slave.Close()
	master.Close()
	<-done
	if err != nil {
		t.Fatalf("command failed: %v\n%s", err, out.String())
	}
	if n <= 0 && !errors.Is(rerr, unix.EAGAIN) {
		t.Fatalf("reading the terminal's input queue: %d %v", n, rerr)
	}
	if n < 0 {
		n = 0
	}
	return out.String(), string(buf[:n])
}

// TestTIOCSTI: the command runs with the caller's terminal as its controlling
// terminal (as when a user starts agentbox from an interactive shell) and pushes a
// command line into the terminal's input queue with TIOCSTI. Whatever the kernel
// allows (dev.tty.legacy_tiocsti), nothing may reach the queue: the caller's shell
// would read and run it after agentbox exits. Both backends refuse the ioctl with a
// seccomp filter (native: its own; bwrap: the same program through --add-seccomp-fd).
// The control runs the same script unsandboxed and must inject, where the kernel
// still allows TIOCSTI, so that the test can fail.
func TestTIOCSTI(t *testing.T) {
	t.Run("control", func(t *testing.T) {
		b := sandboxtest.NewBox(t, "native")
		out, injected := onTerminal(t, testenv.Command(t, b.Home, "/bin/sh", "-c", tiocstiScript))
		legacy := strings.TrimSpace(sandboxtest.ReadFileOr("/proc/sys/dev/tty/legacy_tiocsti"))
		if legacy == "0" {
			if injected != "" {
				t.Fatalf("legacy_tiocsti=0 but injected %q", injected)
			}
			t.Logf("kernel refuses TIOCSTI itself (legacy_tiocsti=0): %s", out)
			return
		}
		if !strings.Contains(injected, "echo INJECTED-BY-SANDBOX") {
			t.Fatalf("unsandboxed TIOCSTI did not inject (the test could not fail): %q\n%s", injected, out)
		}
	})
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			out, injected := onTerminal(t, b.Command(b.Repo, []string{"--no-git-save", "--no-record"}, tiocstiScript))
			attempts.Add(2)
			t.Logf("session on the terminal:\n%s", out)
			if injected != "" {
				t.Errorf("TIOCSTI injected %q into the caller's terminal input", injected)
			}
			if strings.Contains(out, "TIOCSTI accepted") || strings.Count(out, "refused errno 1") != 2 {
				t.Errorf("TIOCSTI not refused with EPERM inside the sandbox:\n%s", out)
			}
		})
	}
}
