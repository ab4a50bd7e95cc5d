// Package trustedexec opens a program the launcher executes on the host so that
// what it checked is what runs: one walk from "/" that holds each entry it
// resolves and refuses an entry another user could change, and the path that
// executes the open file itself rather than whatever its name leads to later.
// Not for files the launcher only reads: their checks are the audit's.
package trustedexec

import (
	"os"
	"strconv"

	"github.com/agentbox/agentbox/internal/termsafe"
)

// Opened is what Open resolved: the file, open O_PATH and close-on-exec, its path
// with every link resolved, and the links followed on the way, by their own paths.
type Opened struct {
	File  *os.File
	Real  string
	Links []string
}

// Untrusted is Open's refusal of an entry on the way: what, and why, in one line.
// Served marks a refusal of a user's FUSE mount (served.go), for which a caller
// may know another way out.
type Untrusted struct {
	Reason string
	Served bool
}

func (u *Untrusted) Error() string { return u.Reason }

// ExecPath is the path that executes the file open at descriptor fd, of the process
// that executes it: the kernel resolves it to the open file itself, not to whatever
// lies at the file's path now.
func ExecPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// Writers names who besides the owner may write a file of mode m, or "".
func Writers(m uint32) string {
	switch {
	case m&0o022 == 0o022:
		return "group and others"
	case m&0o020 != 0:
		return "group"
	case m&0o002 != 0:
		return "others"
	}
	return ""
}

// quote keeps a hostile path on one line in messages, free of terminal controls.
func quote(s string) string { return termsafe.Quote(s) }
