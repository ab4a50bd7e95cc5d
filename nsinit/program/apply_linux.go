package program

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
	"github.com/agentbox/agentbox/mounts"
)

// The apply pass: each mount operation of the plan as the calls that attach,
// cover or mount it through descriptors, made read-only where the plan says.

func (p *Program) rdonly() uintptr { return p.Words(unix.MOUNT_ATTR_RDONLY, 0, 0, 0) }

// setReadOnly makes the detached tree read-only (mount_setattr), or, before 5.12,
// nothing: attached is then remounted mount by mount.
func (p *Program) setReadOnly(tree int, me MountError) {
	if p.kernel.Setattr {
		me.Op = "mount_setattr rdonly"
		p.op(mountDesc(me), unix.SYS_MOUNT_SETATTR, uintptr(tree), p.Str(""), unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, p.rdonly(), 32)
	}
}

// remountIfNeeded: before 5.12, every mount at or below dest, just attached, is made
// read-only in place.
func (p *Program) remountIfNeeded(dest string) {
	if !p.kernel.Setattr {
		p.op(mountDesc(MountError{Op: "remount", Target: dest}), opRemountRO, uintptr(len(p.remounts)))
		p.remounts = append(p.remounts, dest)
		p.mark("remount " + dest)
	}
}

func (p *Program) apply(op mounts.Op, c captured) error {
	switch op.Kind {
	case mounts.BindRO:
		if isRootRO(op) {
			if !p.kernel.Setattr {
				p.remountIfNeeded("/")
				return nil
			}
			// nodev too, as bwrap binds: a device node elsewhere on the host's
			// filesystems opens only where it is handed in (--device).
			p.op(mountDesc(MountError{Op: "mount_setattr rdonly nodev", Target: "/"}), unix.SYS_MOUNT_SETATTR, uintptr(atFDCWD), p.Str("/"), unix.AT_RECURSIVE,
				p.Words(unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NODEV, 0, 0, 0), 32)
			return nil
		}
		p.setReadOnly(c.tree, MountError{Source: op.Source})
		start := ^uintptr(0)
		if op.IfExists {
			start = p.ifExists(op.Dest) // the tree stays open either way, closed at the end
		}
		dest := p.openBeneath(mountDesc(MountError{Op: "open mount point", Target: op.Dest}), op.Dest, unix.O_PATH)
		p.moveMount(op, c.tree, dest)
		p.remountIfNeeded(op.Dest)
		p.endIfExists(start)
	case mounts.Bind:
		p.moveMount(op, c.tree, p.mkdirAll(op.Dest))
	case mounts.Tmpfs:
		p.tmpfsAt(op.Dest) // with op.Mode (budgetModes)
	case mounts.Proc:
		p.mountAt(op.Dest, "proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	case mounts.Dev:
		p.dev(op.Dest, c.nodes)
	case mounts.Device:
		p.device(op, c.tree)
	case mounts.Overlay:
		return p.overlay(op, c.fd)
	case mounts.ReadOnly:
		if coverKind(op.Dest) == coverMissing {
			break
		}
		dest := p.openBeneath(mountDesc(MountError{Op: "open mount point", Target: op.Dest}), op.Dest, unix.O_PATH)
		tree := p.FdOp(mountDesc(MountError{Op: "open_tree", Source: op.Dest}), unix.SYS_OPEN_TREE, uintptr(dest), p.Str(""),
			unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
		p.cover(op, tree, dest)
		p.CloseFd(tree)
	case mounts.Mask:
		switch coverKind(op.Dest) {
		case coverDir:
			fd := p.openBeneath(mountDesc(MountError{Op: "open mount point", Target: op.Dest}), op.Dest, unix.O_PATH|unix.O_DIRECTORY)
			flags := uintptr(unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
			p.op(mountDesc(MountError{Op: "mount tmpfs", Target: op.Dest, Flags: flags, Data: "mode=0555"}), unix.SYS_MOUNT,
				p.Str("tmpfs"), p.Str(safepath.FdPath(fd)), p.Str("tmpfs"), flags, p.Str("mode=0555"))
			p.CloseFd(fd)
		case coverFile:
			p.cover(mounts.Op{Source: "/dev/null", Dest: op.Dest}, c.tree, p.openBeneath(mountDesc(MountError{Op: "open mount point", Target: op.Dest}), op.Dest, unix.O_PATH))
			p.CloseFd(c.tree)
		}
	default:
		return fmt.Errorf("unknown mount operation %q for %s", op.Kind, op.Dest)
	}
	return nil
}

// ifExists and endIfExists bracket ops that are skipped when their destination is
// gone when the runner gets there (mounts.Op.IfExists: a socket the plan masks,
// removed meanwhile by its owner or by another session; a cover of nothing protects
// nothing, and failing the launch let one session stop another's). The ops between
// must open dest first and close all they open, so that the predictions after them
// hold either way. With openat2 that open is the check itself; before it (a walk
// of opens, of which a failed one leaves its parent open) a faccessat of dest comes
// first, and a file removed between the two fails the launch.
func (p *Program) ifExists(dest string) uintptr {
	start := p.A.Nops
	if !p.kernel.Openat2 {
		p.op(mountDesc(MountError{Op: "look for mount point", Target: dest}), unix.SYS_FACCESSAT, uintptr(atFDCWD), p.Str(dest), unix.F_OK)
	}
	return start
}

func (p *Program) endIfExists(start uintptr) {
	if start >= p.A.Nops {
		return
	}
	op := &p.A.Ops[start]
	if op.Nr != unix.SYS_OPENAT2 && op.Nr != unix.SYS_FACCESSAT {
		return // not a group ifExists began: nothing is skipped
	}
	// Gone, or no longer reached without a link or through directories (swapped
	// by whoever owns the directory, who can move the socket after the launch
	// anyway): the cover protects nothing there; what the path leads to now is
	// the sandbox's own view, with its own covers.
	op.OK = Errnos(unix.ENOENT, unix.ENOTDIR, unix.ELOOP)
	op.OrSkip = p.A.Nops - start - 1
	if !p.kernel.Setattr {
		return // a path remount follows the move: it would fail on the vanished path
	}
	// Removed after the open: move_mount refuses an unlinked mount point with
	// ENOENT, and there is nothing left at the path to cover. The descriptors
	// opened stay as predicted, as the closes after it still run.
	for i := start + 1; i < p.A.Nops; i++ {
		if m := &p.A.Ops[i]; m.Nr == unix.SYS_MOVE_MOUNT {
			m.OK = Errnos(unix.ENOENT)
		}
	}
}

// What a ReadOnly or Mask destination is. The program is compiled before it runs,
// so it looks at the compiler's view of the path: these are kernel-global files of
// /proc and /sys, the same in the sandbox's fresh proc and the host's (compat does
// the same for bwrap), and host daemons' sockets (kernel.HostSockets).
const (
	coverMissing = iota
	coverDir
	coverFile
)

func coverKind(path string) int {
	fi, err := os.Lstat(path)
	switch {
	case err != nil:
		return coverMissing
	case fi.IsDir():
		return coverDir
	}
	return coverFile
}

// cover makes tree read-only and moves it onto dest.
func (p *Program) cover(op mounts.Op, tree, dest int) {
	p.setReadOnly(tree, MountError{Source: op.Source, Target: op.Dest})
	p.moveMount(op, tree, dest)
	p.remountIfNeeded(op.Dest)
}

func (p *Program) moveMount(op mounts.Op, tree, dest int) {
	p.op(mountDesc(MountError{Op: "move_mount", Source: op.Source, Target: op.Dest}), unix.SYS_MOVE_MOUNT,
		uintptr(tree), p.Str(""), uintptr(dest), p.Str(""), unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
	p.CloseFd(dest)
}

// mountAt mounts a new filesystem at dest through a descriptor of the mount point.
func (p *Program) mountAt(dest, fstype, source string, flags uintptr, data string) {
	fd := p.mkdirAll(dest)
	p.mountFd(fd, dest, fstype, source, flags, data)
	p.CloseFd(fd)
}

func (p *Program) mountFd(fd int, dest, fstype, source string, flags uintptr, data string) *Op {
	var dataPtr uintptr
	if data != "" {
		dataPtr = p.Str(data)
	}
	return p.op(mountDesc(MountError{Op: "mount " + fstype, Target: dest, Flags: flags, Data: data}), unix.SYS_MOUNT,
		p.Str(source), p.Str(safepath.FdPath(fd)), p.Str(fstype), flags, dataPtr)
}
