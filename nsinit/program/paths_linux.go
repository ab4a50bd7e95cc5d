package program

import (
	"strings"

	"golang.org/x/sys/unix"
)

// How the program opens and creates paths: one component at a time below the
// runner's root, never through a symlink, with openat2 or the walk that stands in
// for it.

// openAt opens name, one component, below dirfd, never through a symlink.
func (p *Program) openAt(d opDesc, dirfd int, name string, flags int) int {
	d.path = true
	if p.kernel.Openat2 {
		how := p.Words(uint64(flags|unix.O_CLOEXEC), 0, unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
		return p.FdOp(d, unix.SYS_OPENAT2, uintptr(dirfd), p.Str(name), how, 24)
	}
	// O_NOFOLLOW refuses a symlink as the last component (ELOOP) — except with
	// O_PATH, which opens the link itself: opNotSymlink refuses that.
	fd := p.FdOp(d, unix.SYS_OPENAT, uintptr(dirfd), p.Str(name), uintptr(flags|unix.O_NOFOLLOW|unix.O_CLOEXEC), 0)
	if flags&unix.O_PATH != 0 {
		p.op(d, opNotSymlink, uintptr(fd))
	}
	return fd
}

// openBeneath opens abs from the runner's root without following a symlink
// (safepath): one openat2, or a walk of O_NOFOLLOW opens before Linux 5.6.
func (p *Program) openBeneath(d opDesc, abs string, flags int) int {
	rel := strings.Trim(abs, "/")
	if rel == "" {
		rel = "."
	}
	if p.kernel.Openat2 || rel == "." {
		// One open: openat2 resolves every component beneath the root, none a
		// symlink; "." needs no walk.
		return p.openAt(d, p.root, rel, flags)
	}
	comps := strings.Split(rel, "/")
	cur := p.root
	for i, c := range comps {
		f := unix.O_PATH | unix.O_DIRECTORY
		if i == len(comps)-1 {
			f = flags
		}
		next := p.openAt(d, cur, c, f)
		if cur != p.root {
			p.CloseFd(cur)
		}
		cur = next
	}
	return cur
}

// mkdirAll opens dest, creating what is missing of it, one component at a time and
// never through a symlink (safepath.MkdirAll); an existing component is left as it
// is (mkdirat answers EEXIST, even on a read-only file system).
func (p *Program) mkdirAll(dest string) int {
	d := mountDesc(MountError{Op: "create mount point", Target: dest})
	comps := strings.Split(strings.Trim(dest, "/"), "/")
	cur := p.root
	for i, c := range comps {
		if c == "" {
			continue
		}
		p.op(d, unix.SYS_MKDIRAT, uintptr(cur), p.Str(c), 0o755).OK = Errnos(unix.EEXIST)
		flags := unix.O_PATH | unix.O_DIRECTORY
		if i == len(comps)-1 {
			flags = unix.O_PATH // the mount point may be a file
		}
		next := p.openAt(d, cur, c, flags)
		if cur != p.root {
			p.CloseFd(cur)
		}
		cur = next
	}
	if cur == p.root {
		return p.FdOp(d, unix.SYS_OPENAT, uintptr(p.root), p.Str("."), unix.O_PATH|unix.O_CLOEXEC, 0)
	}
	return cur
}
