package adversarial

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// ttyStateScript changes, on its standard input (the caller's terminal), the
// terminal state that outlives the command and that the terminal's modes do not hold:
// a virtual console's keyboard mode (KDSKBMODE K_OFF; on a pseudo-terminal the kernel
// answers ENOTTY, the filter EPERM), the exclusive mode (TIOCEXCL), the shared open
// file description's O_NONBLOCK, a window size no window has (TIOCSWINSZ 0x0), and
// last the line discipline (TIOCSETD n_null, which, where it is taken, discards
// everything written after it).
const ttyStateScript = `perl -e 'use Fcntl;
	ioctl(STDIN, 0x4B45, 4) ? print "KDSKBMODE accepted\n" : print "KDSKBMODE refused errno ", $!+0, "\n";
	ioctl(STDIN, 0x540C, 0) ? print "TIOCEXCL set\n" : print "TIOCEXCL refused errno ", $!+0, "\n";
	my $f = fcntl(STDIN, F_GETFL, 0); fcntl(STDIN, F_SETFL, $f | O_NONBLOCK) and print "O_NONBLOCK set\n";
	my $w = pack("S4", 0, 0, 0, 0); ioctl(STDIN, 0x5414, $w) and print "TIOCSWINSZ 0x0 set\n";
	my $d = pack("i", 27); ioctl(STDIN, 0x5423, $d) ? print "TIOCSETD accepted\n" : print "TIOCSETD refused errno ", $!+0, "\n";'`

// ttyState is what the caller's terminal is left with.
type ttyState struct {
	ldisc    int  // TIOCGETD: 0 is N_TTY
	excl     bool // TIOCGEXCL
	nonblock bool // the shared description's O_NONBLOCK
	size     unix.Winsize
}

// launchSize is the window size the terminal has when the command starts.
var launchSize = unix.Winsize{Row: 24, Col: 80, Xpixel: 640, Ypixel: 384}

// afterOnTerminal runs cmd with a fresh pseudo-terminal as its controlling terminal
// and standard streams, as onTerminal does, and returns what it wrote and the
// terminal's state afterwards, read through the caller's own descriptor of the same
// open file description (never through os.File.Fd, which would clear O_NONBLOCK).
func afterOnTerminal(t *testing.T, cmd *exec.Cmd) (string, ttyState) {
	t.Helper()
	master, slave := openPty(t)
	defer master.Close()
	defer slave.Close()
	if err := unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &launchSize); err != nil {
		t.Fatal(err)
	}
	out, done := startOnPty(t, cmd, master, slave)
	werr := cmd.Wait()
	var st ttyState
	var stErr error
	rc, err := slave.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	_ = rc.Control(func(fd uintptr) {
		var flags, excl int
		if st.ldisc, stErr = unix.IoctlGetInt(int(fd), unix.TIOCGETD); stErr != nil {
			return
		}
		if excl, stErr = unix.IoctlGetInt(int(fd), unix.TIOCGEXCL); stErr != nil {
			return
		}
		if flags, stErr = unix.FcntlInt(fd, unix.F_GETFL, 0); stErr != nil {
			return
		}
		ws, err := unix.IoctlGetWinsize(int(fd), unix.TIOCGWINSZ)
		if stErr = err; err != nil {
			return
		}
		st.size = *ws
		st.excl, st.nonblock = excl != 0, flags&unix.O_NONBLOCK != 0
	})
	// With the last slave descriptor closed the copier reads what is left, then EIO.
	slave.Close()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		master.Close()
		<-done
	}
	if stErr != nil {
		t.Fatalf("reading the terminal's state: %v", stErr)
	}
	if werr != nil {
		t.Fatalf("command failed: %v\n%s", werr, out.String())
	}
	return out.String(), st
}

// TestTerminalStateAfterSession: a command with the caller's terminal leaves it in a
// state that outlives the session and that the modes agentbox puts back do not hold —
// exclusive (no open(2) of it but root's: ssh's and sudo's prompts, editors), its
// shared description non-blocking (the next program's read fails with EAGAIN), a
// window of no rows or columns (the shell and what runs next lay out nothing), its
// line discipline n_null (everything typed and written is discarded), a virtual
// console's keyboard off. After the session the terminal must be as before on every
// runner: the discipline and the console's requests refused by the filter, the
// exclusive mode, the flags and the size put back by the launcher. The control runs
// the script unsandboxed: the exclusive mode, O_NONBLOCK and the size stay, so the
// test can fail.
func TestTerminalStateAfterSession(t *testing.T) {
	if _, err := exec.LookPath("perl"); err != nil {
		testenv.Skip(t, "perl missing")
	}
	t.Run("control", func(t *testing.T) {
		b := sandboxtest.NewBox(t, "native")
		out, st := afterOnTerminal(t, testenv.Command(t, b.Home, "/bin/sh", "-c", ttyStateScript))
		if !st.excl || !st.nonblock || st.size.Row != 0 {
			t.Fatalf("unsandboxed, the terminal was left %+v, want exclusive, non-blocking and 0x0 (the test could not fail)\n%s", st, out)
		}
	})
	for _, backend := range append(sandboxtest.Backends(t), sandboxtest.NativeGo) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			out, st := afterOnTerminal(t, b.Command(b.Repo, []string{"--no-git-save", "--no-record"}, ttyStateScript))
			attempts.Add(4)
			t.Logf("session on the terminal:\n%s", out)
			if st != (ttyState{size: launchSize}) {
				t.Errorf("after the session the caller's terminal is left %+v, want N_TTY, not exclusive, blocking, its launch size %+v", st, launchSize)
			}
			for _, want := range []string{"KDSKBMODE refused errno 1", "TIOCSETD refused errno 1"} {
				if !strings.Contains(out, want) {
					t.Errorf("inside, %q missing: the filter let it through\n%s", want, out)
				}
			}
		})
	}
}

// resizeScript sets a size a window may have, says so (ready), and waits until
// the window is resized (30 rows).
const resizeScript = `perl -e 'my $w = pack("S4", 10, 40, 0, 0); ioctl(STDIN, 0x5414, $w) or die "TIOCSWINSZ: $!";
	open(my $r, ">", "ready") or die; close($r);
	for (1..200) { ioctl(STDIN, 0x5413, $w) or die; last if (unpack("S4", $w))[0] == 30; select(undef, undef, undef, 0.1) }'`

// TestTerminalResizeDuringSessionKept: the session sets a size a window may have,
// then the real window is resized (the terminal's master side sets it, as an
// emulator does). After the session the terminal has the window's size: putting
// back the launch's size would undo the resize, and nothing tells the session's
// request from the window's.
func TestTerminalResizeDuringSessionKept(t *testing.T) {
	if _, err := exec.LookPath("perl"); err != nil {
		testenv.Skip(t, "perl missing")
	}
	for _, backend := range append(sandboxtest.Backends(t), sandboxtest.NativeGo) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			cmd := b.Command(b.Repo, []string{"--no-git-save", "--no-record"}, resizeScript)
			master, slave := openPty(t)
			defer master.Close()
			defer slave.Close()
			if err := unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &launchSize); err != nil {
				t.Fatal(err)
			}
			_, done := startOnPty(t, cmd, master, slave)
			if !sandboxtest.WaitFor(func() bool { return sandboxtest.Exists(filepath.Join(b.Repo, "ready")) }) {
				_ = cmd.Process.Kill()
				t.Fatal("the session never said it was ready")
			}
			window := unix.Winsize{Row: 30, Col: 100, Xpixel: 800, Ypixel: 480}
			if err := unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &window); err != nil {
				t.Fatal(err)
			}
			werr := cmd.Wait()
			ws, err := unix.IoctlGetWinsize(int(slave.Fd()), unix.TIOCGWINSZ)
			slave.Close()
			<-done
			if werr != nil || err != nil {
				t.Fatalf("session: %v; size: %v", werr, err)
			}
			if *ws != window {
				t.Errorf("after the session the terminal's size is %+v, want the window's %+v", *ws, window)
			}
		})
	}
}
