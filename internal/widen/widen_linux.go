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
	root     string // the root it lies below
	dev, ino uint64
	old, set uint32 // permission bits before, and as the Relaxer set them
	journal  bool   // the journal holds the original (Relaxer.Journal)
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
	// Held are Roots held open (O_PATH directory descriptors, by root): such a root
	// is reached through its descriptor, wherever the directory now lies, and
	// paths below it are opened beneath it.
	Held map[string]int
	// Journal, when set, is a directory of agentbox's state where the original
	// modes are written before each widen (journal_linux.go): a killed launcher's
	// are put back by Recover, and two Relaxers widening one inode put back the
	// mode it had before either did.
	Journal string
	mu      sync.Mutex
	done    []widened
	j       *journal
}

// openRoot opens root (one of Roots) O_PATH, through its held descriptor if any.
func (r *Relaxer) openRoot(root string) (int, error) {
	if fd, ok := r.Held[root]; ok {
		return unix.Openat(fd, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
	return safepath.Open(root, unix.O_PATH)
}

// rootOf is the longest of Roots that abs lies below, "" for none.
func (r *Relaxer) rootOf(abs string) string {
	root := ""
	for _, c := range r.Roots {
		if hostpath.Within(abs, c) && len(c) > len(root) {
			root = c
		}
	}
	return root
}

// open is safepath.Open, beneath a held root's descriptor when abs lies below one.
func (r *Relaxer) open(abs string, flags int) (int, error) {
	if r != nil {
		if root := r.rootOf(abs); root != "" {
			if fd, ok := r.Held[root]; ok {
				return safepath.OpenBeneath(fd, strings.TrimPrefix(abs, root), flags)
			}
		}
	}
	return safepath.Open(abs, flags)
}

// Open is safepath.Open that, when the open fails with EACCES, widens the modes on
// the way to abs (Widen) and tries once more.
func (r *Relaxer) Open(abs string, flags int) (int, error) {
	fd, err := r.open(abs, flags)
	if r == nil || !errors.Is(err, unix.EACCES) {
		return fd, err
	}
	if !r.Widen(abs) {
		return fd, err
	}
	return r.open(abs, flags)
}

// Widen adds the owner's DirBits to each directory from abs's root down to abs,
// and FileBits to abs when it is a regular file, where the launching
// user owns it and lacks them. It reports whether it changed anything. Components
// are opened O_PATH|O_NOFOLLOW, one at a time: a symlink, "." or ".." ends the walk.
func (r *Relaxer) Widen(abs string) bool {
	if r == nil {
		return false
	}
	root := r.rootOf(abs)
	if root == "" {
		return false
	}
	fd, err := r.openRoot(root)
	if err != nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := false
	path := root
	rest := strings.Split(strings.Trim(strings.TrimPrefix(abs, root), "/"), "/")
	for {
		changed = r.widenFd(fd, root, path) || changed
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
func (r *Relaxer) widenFd(fd int, root, path string) bool {
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
	changed, _ := r.add(fd, root, path, &st, need)
	return changed
}

// add adds need to the permission bits of the inode open at fd (seen as st),
// journaled when the Relaxer has a journal, and remembers it for Restore.
func (r *Relaxer) add(fd int, root, path string, st *unix.Stat_t, need uint32) (bool, error) {
	old := st.Mode & 0o7777
	if old&need == need {
		return false, nil
	}
	w := widened{path: path, root: root, dev: st.Dev, ino: st.Ino, old: old, set: old | need}
	if r.Journal != "" {
		if r.j == nil {
			r.j = &journal{dir: r.Journal}
		}
		set, err := r.j.widen(fd, path, st, need)
		if err != nil || set == 0 {
			return false, err
		}
		w.set, w.journal = set, true
	} else if err := unix.Chmod(fdLink(fd), old|need); err != nil {
		// chmod through the descriptor's /proc link: fchmod refuses an O_PATH
		// descriptor, and a path could be swapped for a symlink meanwhile.
		return false, err
	}
	r.done = append(r.done, w)
	return true, nil
}

// WidenOpen adds bits to the owner's permissions of the directory or file open
// at fd, whose path is abs (below one of Roots), as Widen does: journaled, and
// put back by Restore. The quarantine makes a parent writable this way to move
// an entry out of it.
func (r *Relaxer) WidenOpen(fd int, abs string, bits uint32) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if int(st.Uid) != os.Geteuid() {
		return unix.EPERM
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_, err := r.add(fd, r.rootOf(abs), abs, &st, bits)
	return err
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
		fd, err := r.reopen(w)
		if w.journal {
			r.j.restore(fd, w.dev, w.ino) // fd -1: moved aside, or gone
		} else if err == nil {
			var st unix.Stat_t
			if unix.Fstat(fd, &st) == nil && st.Dev == w.dev && st.Ino == w.ino && st.Mode&0o7777 == w.set {
				_ = unix.Chmod(fdLink(fd), w.old)
			}
		}
		if err == nil {
			unix.Close(fd)
		}
	}
	r.done = nil
	if r.j != nil {
		r.j.release()
	}
}

// reopen opens a widened path again, O_PATH without following a symlink; -1
// when it is gone or moved aside.
func (r *Relaxer) reopen(w widened) (int, error) {
	if fd, ok := r.Held[w.root]; ok {
		rel := strings.TrimPrefix(w.path, w.root)
		if strings.Trim(rel, "/") == "" {
			return unix.Openat(fd, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		}
		fd, err := safepath.OpenBeneath(fd, rel, unix.O_PATH|unix.O_NOFOLLOW)
		if err != nil {
			return -1, err
		}
		return fd, nil
	}
	fd, err := safepath.Open(w.path, unix.O_PATH|unix.O_NOFOLLOW)
	if err != nil {
		return -1, err
	}
	return fd, nil
}

func fdLink(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }
