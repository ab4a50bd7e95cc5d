package audit

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/safepath"
)

// What the audit cannot read as found. The sandbox's files are the launching
// user's, and so is the audit: a directory a session made unlistable (chmod 0311,
// 0000, 0200) or a config it made unreadable is still the user's, and the user's Git
// can cd through an x-only directory, or runs there once the user chmods it back.
// So, where a read fails with EACCES, the audit adds the owner's read (and search)
// permission to each path component it owns, below the repository, through an
// O_PATH descriptor that never follows a symlink, and puts each mode back when done
// (unless something else changed it meanwhile). What it still cannot see into is a
// blind Skip: the end of a session moves it aside, and a session whose audit could
// neither see into nor move a place fails (Finding.Unresolved).

// widened is a path whose mode the audit widened for itself.
type widened struct {
	path     string
	dev, ino uint64
	old, set uint32 // permission bits before, and as the audit set them
}

// relaxer widens the owner's permissions below its roots, and remembers what it
// widened so that restore puts it back. Safe for concurrent use.
type relaxer struct {
	roots []string // the repository and the writable gitdirs outside it
	mu    sync.Mutex
	done  []widened
}

// open is safepath.Open that, when the open fails with EACCES, widens the modes on
// the way to abs (widen) and tries once more.
func (r *relaxer) open(abs string, flags int) (int, error) {
	fd, err := safepath.Open(abs, flags)
	if r == nil || !errors.Is(err, unix.EACCES) {
		return fd, err
	}
	if !r.widen(abs) {
		return fd, err
	}
	return safepath.Open(abs, flags)
}

// widen adds owner read and search permission to each directory from abs's root
// down to abs, and owner read permission to abs when it is a regular file, where the
// launching user owns it and lacks them. It reports whether it changed anything.
// Components are opened O_PATH|O_NOFOLLOW, one at a time: a symlink ends the walk.
func (r *relaxer) widen(abs string) bool {
	if r == nil {
		return false
	}
	root := ""
	for _, c := range r.roots {
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
func (r *relaxer) widenFd(fd int, path string) bool {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || int(st.Uid) != os.Geteuid() {
		return false
	}
	need := uint32(0)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		need = 0o500
	case unix.S_IFREG:
		need = 0o400
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

// restore puts back, deepest first, each mode widen changed and nothing else
// changed since.
func (r *relaxer) restore() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.done) - 1; i >= 0; i-- {
		w := r.done[i]
		fd, err := safepath.Open(w.path, unix.O_PATH|unix.O_NOFOLLOW)
		if err != nil {
			continue // moved aside by the quarantine, or gone
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

// denied reports whether err is a permission error that widen may cure.
func denied(err error) bool { return errors.Is(err, unix.EACCES) }

// blindSkip says whether a place the scan could not inspect (args: the skip's
// message arguments, the error among them) is one the user's Git may still read
// or run, and whether it can be moved aside; why says why a place is not blind.
func (s *scanner) blindSkip(path string, args []any) (blind, stuck bool, why string) {
	if _, ok := s.pseudo[path]; ok {
		return false, false, ""
	}
	for _, a := range args {
		if err, ok := a.(error); ok && errors.Is(err, fs.ErrNotExist) {
			return false, false, "" // gone: there is nothing left to run
		}
	}
	var st unix.Stat_t
	if unix.Lstat(path, &st) == nil && int(st.Uid) != os.Geteuid() {
		mode := uint32(unix.X_OK)
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			mode = unix.R_OK
		}
		if errors.Is(unix.Faccessat(unix.AT_FDCWD, path, mode, unix.AT_EACCESS|unix.AT_SYMLINK_NOFOLLOW), unix.EACCES) {
			// The sandbox ran as this user: it could not enter it either.
			return false, false, "; you cannot enter it, so neither could the sandbox nor can your Git"
		}
	}
	stuck = s.stopped || path == s.repo
	for _, g := range s.opt.GitDirs {
		stuck = stuck || path == g
	}
	return true, stuck, ""
}

// roots are the places below which the audit may widen modes: the repository and
// the writable gitdirs outside it.
func roots(repo string, gitDirs []string) []string {
	return append([]string{repo}, gitDirs...)
}

// openParent opens dir, a finding's parent, for the quarantine: widened below the
// finding's roots where the scan's modes were put back, the modes restored by done.
func openParent(dir string, roots []string) (fd int, done func(), err error) {
	r := &relaxer{roots: roots}
	fd, err = r.open(dir, unix.O_RDONLY|unix.O_DIRECTORY)
	return fd, r.restore, err
}

// lstat is os.Lstat that, when a directory on the way denies search permission,
// widens the modes to p's parent and tries once more.
func (s *scanner) lstat(p string) (os.FileInfo, error) {
	fi, err := os.Lstat(p)
	if denied(err) && s.relax.widen(filepath.Dir(p)) {
		fi, err = os.Lstat(p)
	}
	return fi, err
}
