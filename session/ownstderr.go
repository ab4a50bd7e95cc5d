package session

import (
	"io"
	"os"

	"github.com/agentbox/agentbox/session/prepare"
)

// ownDescriptor returns w writing through a new descriptor of the same open file
// (prepare.DupFile) when w is, or writes through (termsafe.Writer), standard output
// or error, and a function that puts w back as it was and closes that descriptor.
// A line of agentbox's whose reader is gone (agentbox exec … 2>&1 | head) then
// fails alone, where through descriptor 2 Go would end the launcher by SIGPIPE
// with its end work (record, audit, --disk-tmp) undone.
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
	if !ok || !isStdStream(f) {
		return w, func() {}
	}
	own, err := prepare.DupFile(f)
	if err != nil {
		return w, func() {}
	}
	return own, func() { own.Close() }
}

// isStdStream reports whether f is descriptor 1 or 2 (read without Fd, which would
// make the caller's stream blocking).
func isStdStream(f *os.File) bool {
	rc, err := f.SyscallConn()
	std := false
	if err == nil {
		_ = rc.Control(func(fd uintptr) { std = fd == 1 || fd == 2 })
	}
	return std
}
