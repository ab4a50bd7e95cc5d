package termout

import (
	"bytes"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/ptytest"
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
	var got []byte
	for i := 0; i < 8 && !bytes.Contains(got, []byte("flowing")); i++ {
		buf := make([]byte, 4096)
		n, _ := master.Read(buf)
		got = append(got, buf[:n]...)
	}
	if !bytes.Contains(got, []byte("flowing")) {
		t.Fatalf("master read %q", got)
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

// TestLineStart: the first line starts at column 0 whatever the command left (the
// width's spaces wrap unless at column 0 already, then a carriage return), and every
// line ends with one, for a terminal left in raw mode.
func TestLineStart(t *testing.T) {
	master, slave := ptytest.Open(t, -1, -1)
	defer master.Close()
	defer slave.Close()
	if err := unix.IoctlSetWinsize(int(slave.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: 8}); err != nil {
		t.Fatal(err)
	}
	raw, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	raw.Oflag &^= unix.OPOST
	if err := unix.IoctlSetTermios(int(slave.Fd()), unix.TCSETS, raw); err != nil {
		t.Fatal(err)
	}
	w := Bounded(slave)
	_, _ = w.Write([]byte("a\nb\n"))
	_, _ = w.Write([]byte("c\n"))
	want := "       \ra\r\nb\r\nc\r\n"
	var got []byte
	read := make(chan []byte)
	go func() {
		for {
			buf := make([]byte, 256)
			n, err := master.Read(buf)
			if err != nil {
				close(read)
				return
			}
			read <- buf[:n]
		}
	}()
	for len(got) < len(want) {
		select {
		case b, ok := <-read:
			if !ok {
				t.Fatalf("terminal closed after %q", got)
			}
			got = append(got, b...)
		case <-time.After(5 * time.Second):
			t.Fatalf("terminal got %q, want %q", got, want)
		}
	}
	if string(got) != want {
		t.Errorf("terminal got %q, want %q", got, want)
	}
}
