// Package termout writes the launcher's own lines to the operator's terminal after a
// session without ever blocking for ever on it. The launcher restarts the terminal's
// output and restores its modes when it holds the terminal's foreground
// (nsinit, docs/terminal.md); what it cannot repair — output stopped while agentbox
// was put in the background, a terminal emulator that no longer reads — must not
// hang it either: a write that cannot go through within its bound is dropped, and so
// is everything written after it (the session's record keeps every line).
package termout

import (
	"io"
	"os"
	"strconv"
	"time"
)

// Bound is how long one write may wait for the terminal to take it (a variable for
// the package's tests).
var Bound = 5 * time.Second

// Writer writes to the terminal through a non-blocking descriptor of its own, with a
// deadline per write.
type Writer struct {
	f    *os.File
	dead bool // a write timed out: everything after it is dropped
}

// Bounded returns w itself unless it is a terminal; for a terminal, a Writer whose
// writes wait at most Bound. The terminal is opened anew (/proc/self/fd/N): a
// descriptor of its own, made non-blocking without touching the one shared with the
// operator's shell. Where that open fails (a terminal set exclusive, no /proc), w is
// returned as it is.
func Bounded(w io.Writer) io.Writer {
	// A writer that writes through another (termsafe.Writer) keeps its job and
	// gets a bounded writer underneath.
	if wr, ok := w.(interface {
		Inner() io.Writer
		SetInner(io.Writer)
	}); ok {
		wr.SetInner(Bounded(wr.Inner()))
		return w
	}
	f, ok := w.(*os.File)
	if !ok || !isTerminal(f) {
		return w
	}
	nb, err := reopenNonblocking(f)
	if err != nil {
		return w
	}
	return &Writer{f: nb}
}

// Write writes p, or drops it once the terminal has not taken a write within Bound.
func (w *Writer) Write(p []byte) (int, error) {
	if w.dead {
		return len(p), nil
	}
	_ = w.f.SetWriteDeadline(time.Now().Add(Bound))
	n, err := w.f.Write(p)
	if err != nil {
		w.dead = true
		return len(p), nil
	}
	return n, nil
}

func fdPath(f *os.File) string { return "/proc/self/fd/" + strconv.Itoa(int(f.Fd())) }
