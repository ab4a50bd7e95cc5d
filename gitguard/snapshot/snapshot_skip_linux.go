package snapshot

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
)

// maxSkipLines bounds the skipped entries a snapshot names one by one: a gitdir with
// a million FIFOs must not make a million-line report.
const maxSkipLines = 20

// skip records that the entry at src, of type t, is not archived. It is never opened.
func (a *archiver) skip(src string, t fs.FileMode) {
	if t&fs.ModeSocket != 0 && filepath.Base(src) == "fsmonitor--daemon.ipc" {
		return // Git's own fsmonitor daemon listens there: nothing to say
	}
	b := a.budget
	switch n := len(b.skipped); {
	case n < maxSkipLines:
		b.skipped = append(b.skipped, fmt.Sprintf("%s: %s, not archived", quoteControl(src), typeName(t)))
	case n == maxSkipLines:
		b.skipped = append(b.skipped, "… and more entries that are not regular files, not archived")
	}
}

func typeName(t fs.FileMode) string {
	switch {
	case t&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case t&fs.ModeSocket != 0:
		return "a socket"
	case t&fs.ModeDevice != 0:
		return "a device"
	}
	return "not a regular file"
}

// quoteControl quotes s when it holds control characters, so a hostile name stays
// on one line of the operator's terminal.
func quoteControl(s string) string {
	if strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return strconv.Quote(s)
	}
	return s
}
