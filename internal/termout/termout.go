// Package termout writes the launcher's own lines to the operator's terminal after a
// session without ever blocking for ever on it. The launcher restarts the terminal's
// output and restores its modes when it holds the terminal's foreground
// (nsinit, docs/terminal.md); what it cannot repair — output stopped while agentbox
// was put in the background, a terminal emulator that no longer reads — must not
// hang it either: a write that cannot go through within its bound is dropped, and so
// is everything written after it (the session's record keeps every line).
package termout

import (
	"bytes"
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
	cols int  // the terminal's width when the session ended; 0: unknown
	// started: the first line has been written, after the move to column 0.
	started bool
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
	return &Writer{f: nb, cols: columns(f)}
}

// lineStart moves the cursor to column 0 of a fresh line without erasing what the
// command left on its last line, as zsh and fish do before a prompt: width-1 spaces
// wrap to the next line unless the cursor was at column 0 already, then a carriage
// return. A command that ended in raw mode or mid-line leaves the cursor anywhere.
func (w *Writer) lineStart() []byte {
	if w.cols < 2 {
		return []byte("\r")
	}
	return append(bytes.Repeat([]byte(" "), w.cols-1), '\r')
}

// Write writes p, or drops it once the terminal has not taken a write within Bound.
func (w *Writer) Write(p []byte) (int, error) {
	if w.dead {
		return len(p), nil
	}
	// Each line ends with a carriage return too: a terminal left without output
	// processing (raw mode, when the launcher could not restore it) would step them.
	out := bytes.ReplaceAll(p, []byte("\n"), []byte("\r\n"))
	if !w.started {
		w.started = true
		out = append(w.lineStart(), out...)
	}
	_ = w.f.SetWriteDeadline(time.Now().Add(Bound))
	if _, err := w.f.Write(out); err != nil {
		w.dead = true
	}
	return len(p), nil
}

func fdPath(f *os.File) string { return "/proc/self/fd/" + strconv.Itoa(int(f.Fd())) }
