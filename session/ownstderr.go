package session

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// A write to descriptor 1 or 2 whose reader is gone (agentbox exec … 2>&1 | head)
// fails with EPIPE, and Go then ends the whole process by SIGPIPE, as a C program
// that does not handle it ends: the launcher died on its first line after the
// command — the record left unfinished, a --disk-tmp directory left behind, the
// audit put off to the next launch — and a Go API caller died with it. Written
// through a descriptor of its own, numbered above 2, the same write fails with
// EPIPE only, and the session's work goes on.

// ownDescriptor returns w writing through a new descriptor of the same open file
// when w is, or writes through (termsafe.Writer), standard output or error, and a
// function that puts w back as it was and closes that descriptor.
func ownDescriptor(w io.Writer) (io.Writer, func()) {
	if wr, ok := w.(interface {
		Inner() io.Writer
		SetInner(io.Writer)
	}); ok {
		old := wr.Inner()
		own, undo := ownDescriptor(old)
		if own == old {
			return w, undo
		}
		wr.SetInner(own)
		return w, func() {
			if wr.Inner() == own { // termout.Bounded has not put a writer of its own there
				wr.SetInner(old)
			}
			undo()
		}
	}
	f, ok := w.(*os.File)
	if !ok {
		return w, func() {}
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return w, func() {}
	}
	nfd := -1
	if rc.Control(func(fd uintptr) {
		if fd == 1 || fd == 2 {
			nfd, _ = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 3)
		}
	}) != nil || nfd < 0 {
		return w, func() {}
	}
	own := os.NewFile(uintptr(nfd), f.Name())
	return own, func() { own.Close() }
}
