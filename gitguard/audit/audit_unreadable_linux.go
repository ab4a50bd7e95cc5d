package audit

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/widen"
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

// relaxer widens the owner's permissions below its roots (the repository and the
// writable gitdirs outside it); see internal/widen.
type relaxer = widen.Relaxer

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
	sp, done, err := s.sys(path) // audit_held_linux.go
	if err != nil {
		sp, done = "", func() {}
	}
	defer done()
	if unix.Lstat(sp, &st) == nil && int(st.Uid) != os.Geteuid() {
		mode := uint32(unix.X_OK)
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			mode = unix.R_OK
		}
		if errors.Is(unix.Faccessat(unix.AT_FDCWD, sp, mode, unix.AT_EACCESS|unix.AT_SYMLINK_NOFOLLOW), unix.EACCES) {
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
// finding's roots where the scan's modes were put back, the modes restored by
// r.Restore.
func openParent(dir string, r *relaxer) (int, error) {
	return r.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY)
}

// relaxer widens below the scan's roots, the held directories through their
// descriptors, journaling to ScanOptions.WidenJournal.
func (p place) relaxer() *relaxer {
	r := &relaxer{Roots: p.roots, Journal: p.journal}
	for _, h := range p.holds {
		if r.Held == nil {
			r.Held = map[string]int{}
		}
		r.Held[h.now] = h.h.fd
	}
	return r
}

// lstat is os.Lstat that, when a directory on the way denies search permission,
// widens the modes to p's parent and tries once more.
func (s *scanner) lstat(p string) (os.FileInfo, error) {
	fi, err := s.osLstat(p)
	if denied(err) && s.relax.Widen(filepath.Dir(p)) {
		fi, err = s.osLstat(p)
	}
	return fi, err
}
