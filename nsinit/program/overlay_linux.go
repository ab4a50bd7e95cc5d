package program

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/overlay"
)

// HOME's disposable overlay, whose upper layer lives in the tmpfs budget.

// overlay mounts HOME's disposable overlay. The lower layer is the host directory
// captured before anything covered it. The upper and work dirs live in a directory
// of the tmpfs budget bound at the destination itself, which the overlay then covers: nothing in the
// sandbox can reach them, and they vanish with the namespace. The upper dir's owner
// and mode are the lower dir's as the compiler sees it now (overlay.UpperFor): the
// launcher, or the Go init once its id maps are written (an owner the namespace does
// not map reads as the overflow id, which is not the sandbox's).
func (p *Program) overlay(op mounts.Op, lower int) error {
	// Looked at as the capture opens it: without following a symlink on the way.
	fd, err := safepath.Open(op.Source, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return &MountError{Op: "open overlay lower", Source: op.Source, Err: err}
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	unix.Close(fd)
	if err != nil {
		return &MountError{Op: "stat overlay lower", Source: op.Source, Err: err}
	}
	scratch := p.overlayScratch(op.Dest)
	for _, d := range []string{overlay.UpperDir, overlay.WorkDir} {
		p.op(mountDesc(MountError{Op: "mkdir overlay " + d, Target: op.Dest}), unix.SYS_MKDIRAT, uintptr(scratch), p.Str(d), overlay.ScratchMode)
	}
	up := overlay.UpperFor(overlay.Attr{UID: st.Uid, GID: st.Gid, Mode: st.Mode}, os.Getuid(), os.Getgid())
	if up.Chown {
		p.op(mountDesc(MountError{Op: "chown overlay upper", Target: op.Dest}), unix.SYS_FCHOWNAT,
			uintptr(scratch), p.Str(overlay.UpperDir), uintptr(st.Uid), uintptr(st.Gid), unix.AT_SYMLINK_NOFOLLOW)
	}
	p.op(mountDesc(MountError{Op: "chmod overlay upper", Target: op.Dest}), unix.SYS_FCHMODAT, uintptr(scratch), p.Str(overlay.UpperDir), uintptr(up.Mode))
	dir := safepath.FdPath(scratch) + "/"
	data := overlay.Options([]string{safepath.FdPath(lower)}, dir+overlay.UpperDir, dir+overlay.WorkDir)
	mnt := p.mkdirAll(op.Dest)
	first := p.mountFd(mnt, op.Dest, "overlay", "overlay", overlay.Flags, data)
	if retry, ok := overlay.Fallback(data, unix.EINVAL); ok && !p.kernel.Setattr {
		// Without mount_setattr the kernel may be older than 5.11, whose overlayfs
		// refuses userxattr (EINVAL): then the same mount without.
		first.OK, first.ThenSkip = Errnos(unix.EINVAL), 1
		p.mountFd(mnt, op.Dest, "overlay", "overlay", overlay.Flags, retry)
	}
	p.CloseFd(mnt)
	p.CloseFd(scratch)
	p.CloseFd(lower)
	return nil
}
