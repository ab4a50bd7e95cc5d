// Package safepath opens and creates paths during sandbox setup without ever
// following a symlink: the class of bug behind GHSA-pxhw-h44j-8pfx, where a path
// component swapped for a link sends a mount or a mkdir out of where it was meant to
// go. It uses openat2(RESOLVE_NO_SYMLINKS|RESOLVE_BENEATH) where the kernel has it
// (Linux 5.6) and an O_PATH walk, one O_NOFOLLOW component at a time, elsewhere.
package safepath

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

var (
	probeOnce  sync.Once
	hasOpenat2 bool
)

// HaveOpenat2 reports whether the running kernel has openat2(2).
func HaveOpenat2() bool {
	probeOnce.Do(func() {
		fd, err := unix.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC})
		if err == nil {
			unix.Close(fd)
			hasOpenat2 = true
		}
	})
	return hasOpenat2
}

// ErrSymlink is returned when a component of the path is a symlink.
var ErrSymlink = errors.New("path component is a symlink")

// OpenBeneath opens rel below the directory dirfd with flags (O_CLOEXEC is added),
// refusing symlinks, magic links and ".." in every component. rel may be "" or "."
// for dirfd itself.
func OpenBeneath(dirfd int, rel string, flags int) (int, error) {
	rel = strings.Trim(rel, "/")
	if rel == "" {
		rel = "."
	}
	for _, c := range strings.Split(rel, "/") {
		if c == ".." {
			return -1, fmt.Errorf("open %s: %w", rel, unix.EXDEV)
		}
	}
	if HaveOpenat2() {
		fd, err := unix.Openat2(dirfd, rel, &unix.OpenHow{
			Flags:   uint64(flags | unix.O_CLOEXEC),
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		for err == unix.EAGAIN || err == unix.EINTR {
			fd, err = unix.Openat2(dirfd, rel, &unix.OpenHow{
				Flags:   uint64(flags | unix.O_CLOEXEC),
				Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
			})
		}
		if err == unix.ELOOP {
			err = ErrSymlink
		}
		return fd, err
	}
	return walk(dirfd, rel, flags)
}

// LstatBeneath is the lstat of rel below dirfd under OpenBeneath's rules on the
// way (no symlink, no "..", nothing outside dirfd): rel itself is opened with
// openat2, O_PATH|O_NOFOLLOW, so that a symlink as its last component is opened,
// not followed nor refused, and what was opened is fstat'ed. One lookup, where
// opening the parent and an lstat through /proc/self/fd/N/NAME walk /proc and
// the parent again. Without openat2 it returns errors.ErrUnsupported: the caller
// takes its own way.
func LstatBeneath(dirfd int, rel string, st *syscall.Stat_t) error {
	if !HaveOpenat2() {
		return errors.ErrUnsupported
	}
	rel = strings.Trim(rel, "/")
	if rel == "" {
		rel = "."
	}
	for _, c := range strings.Split(rel, "/") {
		if c == ".." {
			return fmt.Errorf("open %s: %w", rel, unix.EXDEV)
		}
	}
	how := unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	fd, err := unix.Openat2(dirfd, rel, &how)
	for err == unix.EAGAIN || err == unix.EINTR {
		fd, err = unix.Openat2(dirfd, rel, &how)
	}
	if err == unix.ELOOP {
		err = ErrSymlink
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return syscall.Fstat(fd, st)
}

// walk is the pre-5.6 fallback: each directory component is opened O_PATH|O_NOFOLLOW
// relative to the previous one, so a symlink anywhere fails with ELOOP or ENOTDIR.
func walk(dirfd int, rel string, flags int) (int, error) {
	parts := strings.Split(rel, "/")
	cur, err := unix.Openat(dirfd, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for i, c := range parts {
		if c == "." || c == "" {
			continue
		}
		last := i == len(parts)-1
		f := unix.O_PATH | unix.O_NOFOLLOW | unix.O_DIRECTORY | unix.O_CLOEXEC
		if last {
			f = flags | unix.O_NOFOLLOW | unix.O_CLOEXEC
		}
		next, err := unix.Openat(cur, c, f, 0)
		if err == unix.ELOOP || (err == unix.ENOTDIR && !last && isSymlinkAt(cur, c)) {
			err = ErrSymlink
		}
		unix.Close(cur)
		if err != nil {
			return -1, err
		}
		if last && flags&unix.O_PATH != 0 && isSymlinkFd(next) {
			unix.Close(next)
			return -1, ErrSymlink
		}
		cur = next
	}
	if parts[len(parts)-1] == "." || parts[len(parts)-1] == "" {
		// rel was "." or ended in "/": reopen dirfd itself with the caller's flags.
		fd, err := unix.Openat(cur, ".", flags|unix.O_CLOEXEC, 0)
		unix.Close(cur)
		return fd, err
	}
	return cur, nil
}

func isSymlinkAt(dirfd int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}

func isSymlinkFd(fd int) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}

// Open opens the absolute path abs from the root directory with the same rules.
func Open(abs string, flags int) (int, error) {
	if !strings.HasPrefix(abs, "/") {
		return -1, fmt.Errorf("open %s: not absolute", abs)
	}
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(root)
	return OpenBeneath(root, abs, flags)
}

// MkdirAll creates every missing directory of rel below dirfd (mode perm), never
// following a symlink, and returns an O_PATH fd of the last one.
func MkdirAll(dirfd int, rel string, perm uint32) (int, error) {
	cur, err := unix.Openat(dirfd, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for _, c := range strings.Split(strings.Trim(rel, "/"), "/") {
		if c == "" || c == "." {
			continue
		}
		if c == ".." {
			unix.Close(cur)
			return -1, fmt.Errorf("mkdir %s: %w", rel, unix.EXDEV)
		}
		if err := unix.Mkdirat(cur, c, perm); err != nil && err != unix.EEXIST {
			unix.Close(cur)
			return -1, fmt.Errorf("mkdir %s: %w", c, err)
		}
		next, err := OpenBeneath(cur, c, unix.O_PATH|unix.O_DIRECTORY)
		unix.Close(cur)
		if err != nil {
			return -1, fmt.Errorf("open %s: %w", c, err)
		}
		cur = next
	}
	return cur, nil
}

// FdPath is the /proc path through which the kernel resolves fd itself; mount(2)
// given this path acts on exactly the object the fd holds.
func FdPath(fd int) string {
	return fmt.Sprintf("/proc/self/fd/%d", fd)
}
