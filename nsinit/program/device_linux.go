package program

import (
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/mounts"
)

// device binds a captured host device node at its path in the private /dev: a
// new empty file there is its mount point, in directories made as needed. The
// bind is a mount of its own, so the /dev tmpfs's nodev does not apply to it.
func (p *Program) device(op mounts.Op, tree int) {
	dir := p.mkdirAll(filepath.Dir(op.Dest))
	name := filepath.Base(op.Dest)
	f := p.FdOp(mountDesc(MountError{Op: "create", Target: op.Dest}), unix.SYS_OPENAT, uintptr(dir), p.Str(name), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	p.CloseFd(f)
	p.op(mountDesc(MountError{Op: "move_mount", Source: op.Source, Target: op.Dest}), unix.SYS_MOVE_MOUNT,
		uintptr(tree), p.Str(""), uintptr(dir), p.Str(name), unix.MOVE_MOUNT_F_EMPTY_PATH)
	p.CloseFd(tree)
	p.CloseFd(dir)
}
