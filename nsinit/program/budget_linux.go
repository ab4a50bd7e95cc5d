package program

import (
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/overlay"
)

// budget is the one tmpfs that every RAM-backed filesystem the sandbox can write is
// a directory of (mounts.Plan.TmpSize): the plan's tmpfs mounts, /dev and /dev/shm,
// the HOME overlay's upper and work directories. Each is bound from its own
// directory, so they fill one size=, and a session that writes past it gets ENOSPC
// where separate tmpfs mounts would each have taken half of the host's RAM.
//
// The sandbox's mount table shows each directory at its destination only, never the
// budget's root: a tool that maps a file to its other mounts (Codex's sandbox does)
// would otherwise take /tmp for an alias of a path below the root's mount point.
// So before the plan's operations the budget is mounted over the host's /dev, which
// nothing else uses then, its directories are cloned as detached binds, and its root
// is detached again; each operation then attaches its bind.
type budget struct {
	size  int64
	trees []int // detached binds of its directories, in the order the operations take them
	next  int   // the next of trees to hand out
}

// budgetScratch is where the budget's root is mounted while its directories are
// cloned: a directory every host has (the device nodes are captured from it).
const budgetScratch = "/dev"

// budgetModes lists the modes of the budget's directories the plan's operations
// take, in the order apply takes them.
func budgetModes(plan mounts.Plan) []uint32 {
	var modes []uint32
	for _, op := range plan.Ops {
		switch op.Kind {
		case mounts.Tmpfs:
			modes = append(modes, op.Mode)
		case mounts.Dev:
			modes = append(modes, devMode, shmMode)
		case mounts.Overlay:
			modes = append(modes, overlay.ScratchMode)
		}
	}
	return modes
}

// mountBudget makes the budget's directories, each a detached bind, and leaves its
// root mounted nowhere: only the binds hold it then.
func (p *Program) mountBudget(modes []uint32) {
	if len(modes) == 0 {
		return
	}
	d := mountDesc(MountError{Op: "mount tmpfs budget", Target: budgetScratch})
	fd := p.openBeneath(d, budgetScratch, unix.O_PATH|unix.O_DIRECTORY)
	p.mountFd(fd, budgetScratch, "tmpfs", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, mounts.BudgetOptions(p.budget.size))
	p.CloseFd(fd)
	root := p.openBeneath(mountDesc(MountError{Op: "open tmpfs budget", Target: budgetScratch}), budgetScratch, unix.O_PATH|unix.O_DIRECTORY)
	for i, mode := range modes {
		name := strconv.Itoa(i)
		d := mountDesc(MountError{Op: "mkdir in tmpfs budget", Target: budgetScratch + "/" + name})
		p.op(d, unix.SYS_MKDIRAT, uintptr(root), p.Str(name), 0o700)
		// mkdirat applies the umask; the mode is the plan's.
		p.op(d, unix.SYS_FCHMODAT, uintptr(root), p.Str(name), uintptr(mode))
		p.budget.trees = append(p.budget.trees, p.FdOp(mountDesc(MountError{Op: "open_tree", Source: "tmpfs budget", Target: budgetScratch + "/" + name}),
			unix.SYS_OPEN_TREE, uintptr(root), p.Str(name), unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC))
	}
	// Through the root's descriptor: that mount and no other goes.
	p.op(mountDesc(MountError{Op: "detach tmpfs budget", Target: budgetScratch}), unix.SYS_UMOUNT2, p.Str(safepath.FdPath(root)), unix.MNT_DETACH)
	p.CloseFd(root)
}

// budgetTree hands out the next directory of the budget, a detached bind.
func (p *Program) budgetTree(dest string) int {
	if p.budget.next >= len(p.budget.trees) {
		// budgetModes and apply disagree: a bug, not a state of the host.
		panic("program: no tmpfs budget directory left for " + dest)
	}
	p.budget.next++
	return p.budget.trees[p.budget.next-1]
}

// tmpfsAt puts a directory of the budget at dest: what a tmpfs of its own mounted
// there would be, but for the size it shares.
func (p *Program) tmpfsAt(dest string) {
	tree := p.budgetTree(dest)
	p.moveMount(mounts.Op{Source: "tmpfs budget", Dest: dest}, tree, p.mkdirAll(dest))
	p.CloseFd(tree)
}

// overlayScratch attaches a directory of the budget at dest, the HOME overlay's, for
// its upper and work directories, which overlayfs wants on one filesystem in the
// mount namespace; the overlay then covers it. It returns its descriptor.
func (p *Program) overlayScratch(dest string) int {
	tree := p.budgetTree(dest)
	p.moveMount(mounts.Op{Source: "tmpfs budget", Dest: dest}, tree, p.mkdirAll(dest))
	return tree
}
