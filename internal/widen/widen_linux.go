// Package widen lets an audit read what a session made unreadable. The sandbox's
// files are the launching user's, and so is the audit: a directory a session made
// unlistable (chmod 0311, 0000, 0200) or a file it made unreadable is still the
// user's, which the user's tools can open by name through an x-only directory, or
// use once the user chmods it back. So where a read fails with EACCES, the audit
// adds the owner's permission to each path component it owns below its roots,
// through an O_PATH descriptor that never follows a symlink, and puts each mode
// back when done (unless something else changed it meanwhile).
package widen

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/safepath"
)

// widened is a path whose mode the Relaxer widened.
type widened struct {
	path     string
	dev, ino uint64
	old, set uint32 // permission bits before, and as the Relaxer set them
}

// Relaxer widens the owner's permissions below its roots, and remembers what it
// widened so that Restore puts it back. Safe for concurrent use; a nil Relaxer
// widens nothing.
type Relaxer struct {
	Roots []string // clean absolute paths below which modes may be widened
	// DirBits and FileBits are the owner bits a directory and a regular file get;
	// 0 means read and search (0o500), and read (0o400). An audit that also puts
	// entries back adds write (0o700, 0o600).
	DirBits, FileBits uint32
	mu                sync.Mutex
	done              []widened
}

// Open is safepath.Open that, when the open fails with EACCES, widens the modes on
// the way to abs (Widen) and tries once more.
func (r *Relaxer) Open(abs string, flags int) (int, error) {
	fd, err := safepath.Open(abs, flags)
	if r == nil || !errors.Is(err, unix.EACCES) {
		return fd, err
	}
	if !r.Widen(abs) {
		return fd, err
	}
	return safepath.Open(abs, flags)
}

// Widen adds the owner's DirBits to each directory from abs's root down to abs,
// and FileBits to abs when it is a regular file, where the launching
// user owns it and lacks them. It reports whether it changed anything. Components
// are opened O_PATH|O_NOFOLLOW, one at a time: a symlink, "." or ".." ends the walk.
func (r *Relaxer) Widen(abs string) bool {
	if r == nil {
		return false
	}
	root := ""
	for _, c := range r.Roots {
		if hostpath.Within(abs, c) && len(c) > len(root) {
			root = c
		}
	}
	if root == "" {
		return false
	}
	fd, err := safepath.Open(root, unix.O_PATH)
	if err != nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := false
	path := root
	rest := strings.Split(strings.Trim(strings.TrimPrefix(abs, root), "/"), "/")
	for {
		changed = r.widenFd(fd, path) || changed
		if len(rest) == 0 || rest[0] == "" {
			break
		}
		if rest[0] == "." || rest[0] == ".." {
			break // ".." would lead above the root, whose modes are not the Relaxer's
		}
		next, err := unix.Openat(fd, rest[0], unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return changed
		}
		fd, path, rest = next, path+"/"+rest[0], rest[1:]
	}
	unix.Close(fd)
	return changed
}

// widenFd widens the mode of the directory or regular file open (O_PATH) at fd,
// whose path is path, when the launching user owns it.
func (r *Relaxer) widenFd(fd int, path string) bool {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || int(st.Uid) != os.Geteuid() {
		return false
	}
	need := uint32(0)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		need = r.DirBits
		if need == 0 {
			need = 0o500
		}
	case unix.S_IFREG:
		need = r.FileBits
		if need == 0 {
			need = 0o400
		}
	}
	old := st.Mode & 0o7777
	if old&need == need {
		return false
	}
	// chmod through the descriptor's /proc link: fchmod refuses an O_PATH
	// descriptor, and a path could be swapped for a symlink meanwhile.
	if unix.Chmod(fdLink(fd), old|need) != nil {
		return false
	}
	r.done = append(r.done, widened{path: path, dev: st.Dev, ino: st.Ino, old: old, set: old | need})
	return true
}

// Restore puts back, deepest first, each mode Widen changed and nothing else
// changed since.
func (r *Relaxer) Restore() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.done) - 1; i >= 0; i-- {
		w := r.done[i]
		fd, err := safepath.Open(w.path, unix.O_PATH|unix.O_NOFOLLOW)
		if err != nil {
			continue // moved aside, or gone
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Dev == w.dev && st.Ino == w.ino && st.Mode&0o7777 == w.set {
			_ = unix.Chmod(fdLink(fd), w.old)
		}
		unix.Close(fd)
	}
	r.done = nil
}

func fdLink(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }
