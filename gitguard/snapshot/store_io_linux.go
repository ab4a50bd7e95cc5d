package snapshot

// The store's bounds on what it reads and names, and its file writer.

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// maxTreeDepth bounds the directory walk: gitdirs are shallow, and nested submodule
// gitdirs (modules/a/modules/b/…) stay far below this.
const maxTreeDepth = 64

// copyBufSize is the read size for file contents: large enough that a pack streams
// in few system calls, small enough that no file is held in memory.
const copyBufSize = 1 << 20

// writebackChunk is how much is written before the kernel is asked to start writing
// it out.
const writebackChunk = 16 << 20

// writeback writes to f and starts the kernel's writeback of every 16 MiB as soon as
// it is written (sync_file_range, which does not wait), so that the final fsync waits
// for the last chunk rather than the whole archive, and dirty pages do not pile up.
type writeback struct {
	f            *os.File
	off, started int64
}

func (w *writeback) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.off += int64(n)
	if w.off-w.started >= writebackChunk {
		// Advisory: an I/O error here shows again in the fsync that follows.
		_ = unix.SyncFileRange(int(w.f.Fd()), w.started, w.off-w.started, unix.SYNC_FILE_RANGE_WRITE)
		w.started = w.off
	}
	return n, err
}

// maxSkipLines bounds the skipped entries a snapshot names one by one: a gitdir with
// a million FIFOs must not make a million-line report.
const maxSkipLines = 20

// quoteControl quotes s when it holds control characters, so a hostile name stays
// on one line of the operator's terminal.
func quoteControl(s string) string {
	if strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return strconv.Quote(s)
	}
	return s
}
