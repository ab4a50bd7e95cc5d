package program

import (
	"os"
	"sort"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/seccomp"
	"github.com/agentbox/agentbox/mounts"
)

// Compile and its steps in order, with the mounts' capture pass; the apply pass
// is apply_linux.go.

// Options say which parts of the plan a runner carries out.
type Options struct {
	// Nested: bubblewrap built the namespaces and mounts and dropped the
	// privileges; the program does the rest (chdir, the Landlock scope).
	Nested bool
	// Gate, when set, makes the init wait, its sandbox built, for the launcher's
	// go record before the command (nsinit.Options.BeforeExec; the raw init only);
	// it names that step and phase.
	Gate string
}

// ControlFd is where an init finds its end of the control socket.
const ControlFd = 3

// Compile appends the plan's system calls: the mounts, loopback, chdir, the closing
// of every descriptor the program opened, and the privilege drop.
func (p *Program) Compile(plan mounts.Plan, o Options) error {
	if !o.Nested {
		// First: a root session's /proc is read-only once the mounts are made.
		if err := p.lowerUserLimits(plan.UserLimits); err != nil {
			return err
		}
		p.unshareCgroup()
	}
	p.root = p.FdOp(mountDesc(MountError{Op: "open", Target: "/"}), unix.SYS_OPENAT, uintptr(atFDCWD), p.Str("/"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	p.budget.size = plan.TmpSize
	p.ptyMax = plan.PtyMax
	if err := requireDeviceIDs(plan); err != nil {
		return err
	}
	if !o.Nested {
		if err := p.compileMounts(plan); err != nil {
			return err
		}
		if plan.Namespaces.Net {
			p.loopbackUp()
		}
	} else {
		p.checkBoundDevices(plan)
	}
	p.NetDone = p.A.Nops
	p.op(opDesc{step: "chdir " + plan.Workdir}, unix.SYS_CHDIR, p.Str(plan.Workdir))
	// The Landlock ruleset is built while the root is open (its grants are opened
	// beneath it) and outlives the close below, until the command's thread enters it.
	ruleset := p.landlockRuleset(plan)
	if ruleset >= 0 {
		delete(p.opened, ruleset)
	}
	// Every descriptor of the setup goes; what the runner had before stays.
	open := make([]int, 0, len(p.opened))
	for fd := range p.opened {
		open = append(open, fd)
	}
	sort.Ints(open)
	for _, fd := range open {
		p.CloseFd(fd)
	}
	if err := p.dropPrivileges(ruleset, !o.Nested, seccomp.Rules{ConfineSockets: plan.ConfineSockets}); err != nil {
		return err
	}
	p.mark("drop-privileges")
	if o.Gate != "" {
		// The sandbox is built; the command waits for the launcher's host work.
		p.WaitGo(o.Gate, o.Gate)
	}
	if p.Full() {
		return ErrArenaFull
	}
	return nil
}

// unshareCgroup gives the init its cgroup namespace (P5) here rather than at its
// clone: the root of that namespace is the cgroup the init is in when it is made,
// and a prestarted init is moved into its session's cgroup (internal/leafcg) only
// after its clone, before it gets its plan. An init cloned into that cgroup
// (CLONE_INTO_CGROUP) is in it already.
func (p *Program) unshareCgroup() {
	p.op(opDesc{step: "create cgroup namespace"}, unix.SYS_UNSHARE, unix.CLONE_NEWCGROUP)
}

// loopbackUp brings up the new network namespace's loopback, its only interface.
func (p *Program) loopbackUp() {
	d := opDesc{step: "bring up loopback"}
	sock := p.FdOp(d, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	ifr := make([]byte, unix.IFNAMSIZ+24)
	copy(ifr, "lo")
	*(*uint16)(unsafe.Pointer(&ifr[unix.IFNAMSIZ])) = unix.IFF_UP | unix.IFF_LOOPBACK
	p.op(d, unix.SYS_IOCTL, uintptr(sock), unix.SIOCSIFFLAGS, p.bytes(ifr, 8))
	p.CloseFd(sock)
}

// WaitGo makes the init wait for the launcher's recGo. Anything but a full record
// of that kind (the launcher closing the socket) ends it. Nothing else can come
// first: the launcher forwards signals only once it has sent its last recGo
// (Supervise).
func (p *Program) WaitGo(step, phase string) {
	p.op(opDesc{step: step}, unix.SYS_READ, ControlFd, uintptr(unsafe.Pointer(&p.A.In[0])), 8).Fd = 8 + 1
	p.op(opDesc{step: step}, OpIsGo)
	p.mark(phase)
}

// compileMounts: the namespace's mounts are made private first, so that nothing
// propagates in either direction; every host source is captured before any mount
// covers it; then each op in plan order.
//
// Private, not a slave of the host's mounts, and before anything else: a mount the
// host adds later below a shared mount point (a USB stick under /media, an
// automount the sandbox itself triggers) would otherwise appear inside with the
// host's flags, read-write, after the read-only pass that covered only the mounts
// there at launch. Made private before that pass, the tree the pass sees is the
// whole tree the sandbox will ever have; the captured clones are private too.
//
// The plan is applied in two passes, as bubblewrap does:
//
//   - capture: every host source (bind sources, the overlay's lower layer, the device
//     nodes of /dev) is taken as a detached mount or an O_PATH fd while the host view
//     is still intact, resolving paths without following any symlink;
//   - apply: the operations run in plan order on the sandbox view, attaching the
//     captured trees through fds (move_mount), so a source hidden by an earlier
//     operation (a repository below /tmp or below HOME) is still the host's.
//
// Mounts are made in place in the init's mount namespace; no staging root and no
// pivot_root are needed, because nothing outside the namespace is changed and every
// host mount is made read-only recursively.
func (p *Program) compileMounts(plan mounts.Plan) error {
	p.makePrivate()
	caps := make([]captured, len(plan.Ops))
	for i, op := range plan.Ops {
		c := captured{tree: -1, fd: -1}
		switch {
		case isRootRO(op):
		case op.Kind == mounts.Bind || op.Kind == mounts.BindRO || op.Kind == mounts.Device:
			c.tree = p.cloneTree(op.Source, op.SourceID)
		case op.Kind == mounts.Overlay:
			c.fd = p.openBeneath(mountDesc(MountError{Op: "open overlay lower", Source: op.Source}), op.Source, unix.O_PATH|unix.O_DIRECTORY)
		case op.Kind == mounts.Mask:
			if coverKind(op.Dest) == coverFile {
				c.tree = p.cloneTree("/dev/null", mounts.FileID{})
			}
		case op.Kind == mounts.Dev:
			c.nodes = map[string]int{}
			for _, n := range devNodes {
				if _, err := os.Lstat("/dev/" + n); skipDevNode(n, err) {
					continue
				}
				c.nodes[n] = p.cloneTree("/dev/"+n, mounts.FileID{})
			}
		}
		caps[i] = c
	}
	p.mark("capture")
	p.mountBudget(budgetModes(plan))
	for i, op := range plan.Ops {
		if err := p.apply(op, caps[i]); err != nil {
			return err
		}
		p.mark(string(op.Kind) + " " + op.Dest)
	}
	return nil
}

// captured is what the capture pass took for one operation.
type captured struct {
	tree  int            // detached mount (open_tree clone), or -1
	fd    int            // O_PATH fd (overlay lower), or -1
	nodes map[string]int // Dev: detached clones of the device nodes
}

// isRootRO is the first operation of every plan: the whole host read-only, done in
// place with one recursive mount_setattr rather than a second copy of the tree.
func isRootRO(op mounts.Op) bool {
	return op.Kind == mounts.BindRO && op.Source == "/" && op.Dest == "/"
}

// cloneTree captures the mount tree at path as a detached copy, opened without
// following a symlink, checking that it has the identity want (zero: unchecked).
func (p *Program) cloneTree(path string, want mounts.FileID) int {
	d := mountDesc(MountError{Op: "open", Source: path})
	fd := p.openBeneath(d, path, unix.O_PATH)
	if want != (mounts.FileID{}) {
		p.op(d, unix.SYS_FSTAT, uintptr(fd), uintptr(unsafe.Pointer(&p.A.SrcStat)))
		d.sameFile = true
		p.op(d, OpSameFile, uintptr(want.Dev), uintptr(want.Ino))
	}
	tree := p.FdOp(mountDesc(MountError{Op: "open_tree", Source: path}), unix.SYS_OPEN_TREE, uintptr(fd), p.Str(""),
		unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
	p.CloseFd(fd)
	return tree
}
