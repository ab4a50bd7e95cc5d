package termout

import (
	"bytes"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/ptytest"
)

// A terminal whose output is stopped (tcflow TCOOFF, as a command can leave it):
// the bounded write returns instead of blocking for ever, later ones are dropped at
// once, and the descriptor shared with the shell stays blocking. A terminal whose
// output flows gets the line.
func TestBoundedOnStoppedTerminal(t *testing.T) {
	defer func(b time.Duration) { Bound = b }(Bound)
	Bound = 200 * time.Millisecond
	master, slave := ptytest.Open(t, -1, -1)
	defer master.Close()
	defer slave.Close()

	w := Bounded(slave)
	if _, ok := w.(*Writer); !ok {
		t.Fatalf("Bounded(terminal) = %T, want a *Writer", w)
	}
	if _, err := w.Write([]byte("flowing\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, _ := master.Read(buf)
	if !bytes.Contains(buf[:n], []byte("flowing")) {
		t.Fatalf("master read %q", buf[:n])
	}

	if err := unix.IoctlSetInt(int(slave.Fd()), unix.TCXONC, unix.TCOOFF); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_, _ = w.Write([]byte("blocked?\n"))
		_, _ = w.Write([]byte("dropped\n"))
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(100 * Bound): // a bound against a hang, not a timing check
		t.Fatal("a write to a terminal with stopped output did not return")
	}
	if !w.(*Writer).dead {
		t.Error("the timed-out writer goes on writing")
	}
	if fl, err := unix.FcntlInt(slave.Fd(), unix.F_GETFL, 0); err != nil || fl&unix.O_NONBLOCK != 0 {
		t.Errorf("the shared descriptor's flags: %#x, %v; want it blocking as before", fl, err)
	}
	_ = unix.IoctlSetInt(int(slave.Fd()), unix.TCXONC, unix.TCOON)
}

// Anything that is not a terminal is written to as it is.
func TestBoundedElsewhere(t *testing.T) {
	r, wp, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer wp.Close()
	if w := Bounded(wp); w != wp {
		t.Errorf("Bounded(pipe) = %T, want the pipe itself", w)
	}
	var b bytes.Buffer
	if w := Bounded(&b); w != &b {
		t.Errorf("Bounded(buffer) = %T", w)
	}
}
