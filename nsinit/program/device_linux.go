package program

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/mounts"
)

// device binds a captured host device node at its path in the private /dev: a
// new empty file there is its mount point, in directories made as needed. The
// bind is a mount of its own, so the /dev tmpfs's nodev does not apply to it.
// Elsewhere (/dev/null over a history file in HOME, policy.Hidden.Discard) the
// file there is the mount point: opened read-only, so the HOME overlay copies
// nothing of it up, and never through a link.
func (p *Program) device(op mounts.Op, tree int) {
	dir := p.mkdirAll(filepath.Dir(op.Dest))
	name := filepath.Base(op.Dest)
	flags := unix.O_CREAT | unix.O_EXCL | unix.O_WRONLY | unix.O_CLOEXEC
	if !strings.HasPrefix(op.Dest, "/dev/") {
		flags = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	}
	f := p.FdOp(mountDesc(MountError{Op: "create", Target: op.Dest}), unix.SYS_OPENAT, uintptr(dir), p.Str(name), uintptr(flags), 0o600)
	p.CloseFd(f)
	p.op(mountDesc(MountError{Op: "move_mount", Source: op.Source, Target: op.Dest}), unix.SYS_MOVE_MOUNT,
		uintptr(tree), p.Str(""), uintptr(dir), p.Str(name), unix.MOVE_MOUNT_F_EMPTY_PATH)
	p.CloseFd(tree)
	p.CloseFd(dir)
}

// requireDeviceIDs refuses a plan with a device operation that carries no identity
// (mounts.Op.SourceID): bound by path, it would hand in whatever is there at launch,
// a node swapped in after the launcher's device rule judged the one it saw.
func requireDeviceIDs(plan mounts.Plan) error {
	for _, op := range plan.Ops {
		if op.Kind == mounts.Device && op.SourceID == (mounts.FileID{}) {
			return fmt.Errorf("device %s: the plan carries no identity for it (the launcher checks each device before the launch); not launching", op.Source)
		}
	}
	return nil
}

// checkBoundDevices: under bubblewrap, which binds a device by the path its
// descriptor leads to (it has no --dev-bind-fd, and compares the bound file with
// the descriptor only for --bind-fd), the init compares each bound node with the
// identity the launcher verified, before the command runs: a node swapped in
// between fails the launch. The bind holds its node from then on.
func (p *Program) checkBoundDevices(plan mounts.Plan) {
	for _, op := range plan.Ops {
		if op.Kind != mounts.Device {
			continue
		}
		d := mountDesc(MountError{Op: "check bound device", Source: op.Source, Target: op.Dest})
		fd := p.openBeneath(d, op.Dest, unix.O_PATH)
		p.op(d, unix.SYS_FSTAT, uintptr(fd), uintptr(unsafe.Pointer(&p.A.SrcStat)))
		d.sameFile = true
		p.op(d, OpSameFile, uintptr(op.SourceID.Dev), uintptr(op.SourceID.Ino))
		p.CloseFd(fd)
	}
}

// devNodes are the host devices bound into the private /dev.
var devNodes = []string{"null", "zero", "full", "random", "urandom", "tty"}

// skipDevNode is the rule the capture follows: a host without /dev/tty (no
// controlling-terminal device: some containers) gets a /dev without it; any other
// failure to capture a node, tty included, fails the launch. err is what the
// compiler's look at /dev/name got.
func skipDevNode(name string, err error) bool {
	return name == "tty" && errors.Is(err, os.ErrNotExist)
}

// The modes of /dev and /dev/shm, directories of the tmpfs budget.
const (
	devMode = 0o755
	shmMode = 0o1777
)

// dev builds a minimal /dev: a directory of the tmpfs budget (budget_linux.go),
// the host's harmless device nodes, a private
// devpts instance (so the command cannot reach the caller's other terminals) and a
// private shm.
func (p *Program) dev(dest string, nodes map[string]int) {
	p.tmpfsAt(dest)
	dir := p.openBeneath(mountDesc(MountError{Op: "open", Target: dest}), dest, unix.O_PATH|unix.O_DIRECTORY)
	for _, name := range devNodes {
		tree, ok := nodes[name]
		if !ok {
			continue
		}
		f := p.FdOp(mountDesc(MountError{Op: "create", Target: dest + "/" + name}), unix.SYS_OPENAT, uintptr(dir), p.Str(name), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o666)
		p.CloseFd(f)
		p.op(mountDesc(MountError{Op: "move_mount", Source: "/dev/" + name, Target: dest + "/" + name}), unix.SYS_MOVE_MOUNT,
			uintptr(tree), p.Str(""), uintptr(dir), p.Str(name), unix.MOVE_MOUNT_F_EMPTY_PATH)
		p.CloseFd(tree)
	}
	for _, d := range []string{"pts", "shm"} {
		p.op(mountDesc(MountError{Op: "mkdir", Target: dest + "/" + d}), unix.SYS_MKDIRAT, uintptr(dir), p.Str(d), 0o755)
	}
	p.mountAt(dest+"/pts", "devpts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, mounts.DevptsOptions(p.ptyMax))
	p.tmpfsAt(dest + "/shm")
	for _, l := range [][2]string{
		{"pts/ptmx", "ptmx"}, {"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"},
		{"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}, {"/proc/kcore", "core"},
	} {
		p.op(mountDesc(MountError{Op: "symlink", Target: dest + "/" + l[1]}), unix.SYS_SYMLINKAT, p.Str(l[0]), uintptr(dir), p.Str(l[1]))
	}
	p.CloseFd(dir)
}
