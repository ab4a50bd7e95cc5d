package program

import (
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/mounts"
)

// budget is the one tmpfs that every RAM-backed filesystem the sandbox can write is
// a directory of (mounts.Plan.TmpSize): the plan's tmpfs mounts, /dev and /dev/shm,
// the HOME overlay's upper and work directories. Each is bound from its own
// directory, so they fill one size=, and a session that writes past it gets ENOSPC
// where separate tmpfs mounts would each have taken half of the host's RAM.
//
// The budget is mounted at the destination of its first use, which that use's bind
// then covers: its root, where the directories sit side by side, is reachable only
// through the descriptor the program holds while it builds the sandbox.
type budget struct {
	size    int64 // bytes; 0: the kernel's default size
	mounted bool
	root    int // O_PATH descriptor of its root, once mounted
	n       int // directories handed out
}

// budgetDir makes the budget's next directory, with mode, and returns its name
// below the budget's root; the first call mounts the budget at dest.
func (p *Program) budgetDir(dest string, mode uint32) string {
	if !p.budget.mounted {
		fd := p.mkdirAll(dest)
		p.mountFd(fd, dest, "tmpfs", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, mounts.BudgetOptions(p.budget.size))
		p.CloseFd(fd)
		p.budget.root = p.openBeneath(mountDesc(MountError{Op: "open tmpfs budget", Target: dest}), dest, unix.O_PATH|unix.O_DIRECTORY)
		p.budget.mounted = true
	}
	name := strconv.Itoa(p.budget.n)
	p.budget.n++
	d := mountDesc(MountError{Op: "mkdir in tmpfs budget", Target: dest})
	p.op(d, unix.SYS_MKDIRAT, uintptr(p.budget.root), p.Str(name), 0o700)
	// mkdirat applies the umask; the mode is the plan's.
	p.op(d, unix.SYS_FCHMODAT, uintptr(p.budget.root), p.Str(name), uintptr(mode))
	return name
}

// tmpfsAt puts a directory of the budget with mode at dest: what a tmpfs of its own
// mounted there would be, but for the size it shares.
func (p *Program) tmpfsAt(dest string, mode uint32) {
	name := p.budgetDir(dest, mode)
	tree := p.FdOp(mountDesc(MountError{Op: "open_tree", Source: "tmpfs budget", Target: dest}), unix.SYS_OPEN_TREE,
		uintptr(p.budget.root), p.Str(name), unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	p.moveMount(mounts.Op{Source: "tmpfs budget", Dest: dest}, tree, p.mkdirAll(dest))
	p.CloseFd(tree)
}

// overlayScratch returns a descriptor of a directory of the budget (mode) for the
// HOME overlay's upper and work directories, which overlayfs wants on one
// filesystem; dest is the overlay's.
func (p *Program) overlayScratch(dest string, mode uint32) int {
	name := p.budgetDir(dest, mode)
	d := mountDesc(MountError{Op: "open overlay scratch", Target: dest})
	return p.openAt(d, p.budget.root, name, unix.O_PATH|unix.O_DIRECTORY)
}
