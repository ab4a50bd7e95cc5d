package program

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
	"github.com/agentbox/agentbox/internal/seccomp"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/overlay"
)

// Package program is the one definition of how the native backend carries out a
// plan: it compiles a mounts.Plan into a list of system calls, and runs that list
// in ordinary Go (RunUntil). nsinit's raw init runs the same list with a loop of
// its own; neither runner knows what a bind or an overlay is.
//
// The plan as a program.
//
// compile turns a mounts.Plan into a list of system calls — the id maps, the capture
// of every host source, each op in plan order, loopback, chdir, the privilege drop —
// with every argument resolved: strings and structs placed in an Arena outside the Go
// heap, every descriptor number predicted. Two runners execute the same list:
//
//   - the raw init (rawinit_linux_amd64.go): a CLONE_VM child of the CLI with no Go
//     runtime of its own, under vfork-child rules;
//   - the Go init (init_linux.go, runner_linux.go): the agentbox binary re-executed as
//     PID 1, on other architectures, older kernels, for the Go API and in -race builds.
//
// Neither runner knows what a bind or an overlay is: a mount kind is added here, once.
// Where a kernel lacks a call the program would use (openat2 before 5.6,
// mount_setattr before 5.12, overlayfs's userxattr before 5.11), the compiler emits
// the fallback instead, still as ops: an O_NOFOLLOW walk with a symlink check, a
// remount of each mount below a path, a mount retried without userxattr. The raw init
// runs only where none is needed (rawUsable); the Go init runs either.
//
// A compiled op fails the launch unless its errno is the one it tolerates (ok). Two
// more fields let a run take another way without a branch in either runner: orSkip
// skips the ops after a call that failed with the tolerated errno (a mask whose
// destination vanished since the plan was made), thenSkip those after a call that
// succeeded (the overlay's retry). A skipped group closes every descriptor it opens,
// so the predictions after it hold either way.

const (
	MaxOps   = 4096
	MaxMarks = 512
)

// Op is one system call of a compiled plan.
type Op struct {
	Nr   uintptr
	Args [6]uintptr
	OK   uintptr // the errnos that count as success, bit e for errno e (Errnos): EEXIST of a mkdirat; 0: none
	Fd   uintptr // 1 + the descriptor the call must return (the compiler predicts each), 0: any
	Mark uintptr // 1 + the timestamp slot to fill after the call, 0: none
	// orSkip: after a call that failed with ok, skip this many ops.
	OrSkip uintptr
	// thenSkip: after a call that succeeded, skip this many ops.
	ThenSkip uintptr
}

// Ops that are no system call (their numbers are far above every real one).
const (
	// OpSameFile compares the device and inode of the last fstat into srcStat with
	// args[0] and args[1], and fails with ESTALE when they differ (a bind source
	// that is not the one the launcher verified).
	OpSameFile = ^uintptr(0)
	// OpIsGo: the record last read into in must be a recGo, or the op fails with
	// EBADMSG (WaitGo; the raw init only).
	OpIsGo = ^uintptr(1)
	// opNotSymlink fails with ELOOP when the descriptor args[0] is a symlink: the
	// last step of an O_PATH|O_NOFOLLOW walk, before openat2 (Go init only).
	opNotSymlink = ^uintptr(2)
	// opRemountRO makes every mount at or below program.remounts[args[0]] read-only, one
	// remount each, keeping the flags the kernel locks: before mount_setattr (Go
	// init only; it reads the namespace's mount table, which no compiler can).
	opRemountRO = ^uintptr(3)
)

// Arena is the memory a runner touches: no Go pointers, only addresses as uintptr,
// in an anonymous mapping outside the Go heap (the raw init shares it with the
// launcher, and may outlive the launch that made it).
type Arena struct {
	Nops uintptr
	Ops  [MaxOps]Op

	// Written by the runner.
	FailOp  uintptr     // 1 + the index of the op that failed
	Errno   uintptr     // why
	SrcStat unix.Stat_t // of the last bind source checked (OpSameFile)
	In      [2]uint32   // the last record read (WaitGo)
	Times   [MaxMarks]int64
	Ts      unix.Timespec
}

// Features are the kernel's calls a program may use; elsewhere it uses fallbacks.
type Features struct {
	Openat2 bool // 5.6
	Setattr bool // mount_setattr, 5.12: with it overlayfs's userxattr (5.11) is there too
}

// EnvFallbacks, set in the launcher's environment, makes the Go init compile every
// fallback as if its kernel lacked the calls: the old kernels' programs, tested on a
// new one (the kernel matrix runs them where they are needed).
const EnvFallbacks = "_AGENTBOX_NSINIT_FALLBACKS"

// KernelFeatures probes the running kernel.
func KernelFeatures() Features {
	if os.Getenv(EnvFallbacks) != "" {
		return Features{}
	}
	setattr := haveMountSetattr()
	return Features{Openat2: safepath.HaveOpenat2(), Setattr: setattr}
}

// Program is a plan being compiled: the Arena a runner executes, and what the
// launcher (or the Go init) needs to explain a failure.
type Program struct {
	Mem  []byte // the mapping; never unmapped once a runner may use it
	A    *Arena
	strs []byte // the string area, and how much of it is used
	used int
	desc []opDesc // per op
	// Marks name the timestamp slots from slot 2 (slot 1: the raw init's start).
	Marks  []string
	fds    map[int]bool // the runner's descriptor table, as the ops leave it
	opened map[int]bool // the descriptors the program opened and still holds
	root   int          // the runner's descriptor of "/"
	kernel Features
	// NetDone is the op count once the network namespace is set up (loopback): the
	// Go init serves the proxy's listener there before it runs the rest.
	NetDone uintptr
	// remounts are opRemountRO's paths.
	remounts []string
	budget   budget // the tmpfs the writable RAM-backed mounts share (budget_linux.go)
}

// opDesc says what an op is, for the report of its failure.
type opDesc struct {
	step  string
	mount bool       // me is the report's template, its Err the errno (else the errno alone)
	me    MountError // by value: a launch compiles a few hundred of these
	path  bool       // an open that refuses symlinks: ELOOP means a symlink in the path
	// sameFile: an OpSameFile check; its failure means ErrSourceChanged
	sameFile bool
}

// ErrArenaFull: the plan does not fit the program's arena.
var ErrArenaFull = errors.New("compiled plan too large")

// New maps an Arena with head bytes for the runner's own fields (at least
// the Arena's), strBytes of room for strings and tail bytes after them (the raw
// init's stacks). fds are the descriptors open in the runner when it starts.
func New(head, strBytes, tail int, fds map[int]bool, kf Features) (*Program, error) {
	head = (max(head, int(unsafe.Sizeof(Arena{}))) + 4095) &^ 4095
	size := head + (strBytes+4095)&^4095 + tail
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("plan Arena: %w", err)
	}
	return &Program{Mem: mem, A: (*Arena)(unsafe.Pointer(&mem[0])), strs: mem[head : size-tail],
		fds: fds, opened: map[int]bool{}, desc: make([]opDesc, 0, 512), kernel: kf}, nil
}

// full reports whether something did not fit (str, bytes, words and op mark it).
func (p *Program) Full() bool { return p.used > len(p.strs) }

// str places s, NUL-terminated, in the Arena and returns its address.
func (p *Program) Str(s string) uintptr {
	off := p.used
	if off+len(s)+1 > len(p.strs) {
		p.used = len(p.strs) + 1
		return 0
	}
	copy(p.strs[off:], s)
	p.strs[off+len(s)] = 0
	p.used = off + len(s) + 1
	return uintptr(unsafe.Pointer(&p.strs[off]))
}

// bytes places b in the Arena, aligned, and returns its address (0 when full, which
// compile checks once at the end).
func (p *Program) bytes(b []byte, align int) uintptr {
	off := (p.used + align - 1) &^ (align - 1)
	if off+len(b) > len(p.strs) {
		p.used = len(p.strs) + 1
		return 0
	}
	copy(p.strs[off:], b)
	p.used = off + len(b)
	return uintptr(unsafe.Pointer(&p.strs[off]))
}

// words places a struct of machine words in the Arena.
func (p *Program) Words(w ...uint64) uintptr {
	off := (p.used + 7) &^ 7
	if off+8*len(w) > len(p.strs) {
		p.used = len(p.strs) + 1
		return 0
	}
	for i, v := range w {
		*(*uint64)(unsafe.Pointer(&p.strs[off+8*i])) = v
	}
	p.used = off + 8*len(w)
	return uintptr(unsafe.Pointer(&p.strs[off]))
}

// NewFd is the descriptor the kernel gives the next open: the lowest free one.
func (p *Program) NewFd() int {
	for fd := 0; ; fd++ {
		if !p.fds[fd] {
			p.fds[fd] = true
			p.opened[fd] = true
			return fd
		}
	}
}

// op appends a system call described by d.
func (p *Program) op(d opDesc, nr uintptr, args ...uintptr) *Op {
	a := p.A
	if a.Nops >= MaxOps {
		p.used = len(p.strs) + 1 // reported as a full Arena
		return &Op{}
	}
	op := &a.Ops[a.Nops]
	*op = Op{Nr: nr}
	copy(op.Args[:], args)
	a.Nops++
	p.desc = append(p.desc, d)
	return op
}

// FdOp appends a call that returns a new descriptor, and returns its number.
func (p *Program) FdOp(d opDesc, nr uintptr, args ...uintptr) int {
	op := p.op(d, nr, args...)
	fd := p.NewFd()
	op.Fd = uintptr(fd) + 1
	return fd
}

func (p *Program) CloseFd(fd int) {
	p.op(opDesc{step: "close"}, unix.SYS_CLOSE, uintptr(fd))
	delete(p.fds, fd)
	delete(p.opened, fd)
}

// mark times everything since the previous mark as name.
func (p *Program) mark(name string) {
	if p.A.Nops == 0 || len(p.Marks)+2 > MaxMarks {
		return
	}
	p.Marks = append(p.Marks, name)
	p.A.Ops[p.A.Nops-1].Mark = uintptr(len(p.Marks) + 1)
}

// SetFds tells the compiler which descriptors are open in the runner now: the ones
// its predictions must not reuse (the Go init lists them with OpenFds before it
// compiles the plan).
func (p *Program) SetFds(fds map[int]bool) { p.fds = fds }

// markName is the name of timestamp slot (1-based), "" for the start's.
func (p *Program) markName(slot uintptr) string {
	if slot < 2 || int(slot-2) >= len(p.Marks) {
		return ""
	}
	return p.Marks[slot-2]
}

var atFDCWD = unix.AT_FDCWD

func mountDesc(me MountError) opDesc { return opDesc{step: "mount", mount: true, me: me} }

// CompileIDMap: the init's own uid and gid map (uid and gid mapped to themselves),
// setgroups denied first, as the kernel requires for an unprivileged gid map — and
// as P5 wants: no dropping of supplementary groups to get around a group's denial.
// The init may: it maps its own effective ids and holds CAP_SETUID and CAP_SETGID
// in the namespace. Then the init becomes non-dumpable: the command, same uid, must
// not ptrace it or open /proc/1/exe, /proc/1/mem or its fds (runc CVE-2019-5736).
func (p *Program) CompileIDMap(uid, gid int, mapIDs bool) {
	if mapIDs {
		maps := opDesc{step: "map uid and gid"}
		for _, w := range [][2]string{
			{"/proc/self/setgroups", "deny"},
			{"/proc/self/uid_map", fmt.Sprintf("%d %d 1", uid, uid)},
			{"/proc/self/gid_map", fmt.Sprintf("%d %d 1", gid, gid)},
		} {
			fd := p.FdOp(maps, unix.SYS_OPENAT, uintptr(atFDCWD), p.Str(w[0]), unix.O_WRONLY|unix.O_CLOEXEC, 0)
			p.op(maps, unix.SYS_WRITE, uintptr(fd), p.Str(w[1]), uintptr(len(w[1])))
			p.CloseFd(fd)
		}
	}
	p.op(opDesc{step: "set init non-dumpable"}, unix.SYS_PRCTL, unix.PR_SET_DUMPABLE, 0)
	p.mark("idmap")
}

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
	p.root = p.FdOp(mountDesc(MountError{Op: "open", Target: "/"}), unix.SYS_OPENAT, uintptr(atFDCWD), p.Str("/"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	p.budget.size = plan.TmpSize
	if !o.Nested {
		if err := p.compileMounts(plan); err != nil {
			return err
		}
		if plan.Namespaces.Net {
			d := opDesc{step: "bring up loopback"}
			sock := p.FdOp(d, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
			ifr := make([]byte, unix.IFNAMSIZ+24)
			copy(ifr, "lo")
			*(*uint16)(unsafe.Pointer(&ifr[unix.IFNAMSIZ])) = unix.IFF_UP | unix.IFF_LOOPBACK
			p.op(d, unix.SYS_IOCTL, uintptr(sock), unix.SIOCSIFFLAGS, p.bytes(ifr, 8))
			p.CloseFd(sock)
		}
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
	if err := p.dropPrivileges(ruleset, !o.Nested); err != nil {
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
		case op.Kind == mounts.Bind || op.Kind == mounts.BindRO:
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

// devNodes are the host devices bound into the private /dev.
var devNodes = []string{"null", "zero", "full", "random", "urandom", "tty"}

// skipDevNode is the rule the capture follows: a host without /dev/tty (no
// controlling-terminal device: some containers) gets a /dev without it; any other
// failure to capture a node, tty included, fails the launch. err is what the
// compiler's look at /dev/name got.
func skipDevNode(name string, err error) bool {
	return name == "tty" && errors.Is(err, os.ErrNotExist)
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
			p.op(mountDesc(MountError{Op: "mount_setattr rdonly", Target: "/"}), unix.SYS_MOUNT_SETATTR, uintptr(atFDCWD), p.Str("/"), unix.AT_RECURSIVE, p.rdonly(), 32)
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
		p.tmpfsAt(op.Dest, op.Mode)
	case mounts.Proc:
		p.mountAt(op.Dest, "proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	case mounts.Dev:
		p.dev(op.Dest, c.nodes)
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
}

// Errnos is the set of errnos es as Op.OK holds it: bit e for errno e (every one
// the compiler tolerates is below 64).
func Errnos(es ...unix.Errno) uintptr {
	var set uintptr
	for _, e := range es {
		set |= 1 << e
	}
	return set
}

// Tolerated reports whether errno e is in the set ok (Op.OK); nosplit, since the
// raw init calls it.
//
//go:nosplit
func Tolerated(ok, e uintptr) bool { return e < 64 && ok>>e&1 != 0 }

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

// dev builds a minimal /dev: a directory of the tmpfs budget (budget_linux.go),
// the host's harmless device nodes, a private
// devpts instance (so the command cannot reach the caller's other terminals) and a
// private shm.
func (p *Program) dev(dest string, nodes map[string]int) {
	p.tmpfsAt(dest, 0o755)
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
	p.mountAt(dest+"/pts", "devpts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")
	p.tmpfsAt(dest+"/shm", 0o1777)
	for _, l := range [][2]string{
		{"pts/ptmx", "ptmx"}, {"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"},
		{"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}, {"/proc/kcore", "core"},
	} {
		p.op(mountDesc(MountError{Op: "symlink", Target: dest + "/" + l[1]}), unix.SYS_SYMLINKAT, p.Str(l[0]), uintptr(dir), p.Str(l[1]))
	}
	p.CloseFd(dir)
}

// overlay mounts HOME's disposable overlay. The lower layer is the host directory
// captured before anything covered it. The upper and work dirs live on a tmpfs
// mounted at the destination itself, which the overlay then covers: nothing in the
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
	scratch := p.overlayScratch(op.Dest, overlay.ScratchMode)
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

// dropPrivileges leaves the runner's thread, and so the command started from it,
// with no capability in any set, a bounding set that cannot regain one, securebits
// locked so that uid 0 gains nothing on execve (agentbox started as root still runs
// the command without any), no_new_privs, the Landlock domain of ruleset (when not
// -1: landlockRuleset; entering it needs no_new_privs) and the seccomp filter
// against terminal input injection (internal/seccomp). Under bwrap (drop false)
// only the domain: bwrap dropped the rest and installed the filter (the Go init
// checks: checkUnprivileged).
func (p *Program) dropPrivileges(ruleset int, drop bool) error {
	d := opDesc{step: "drop privileges"}
	if drop {
		for c := 0; c <= 63; c++ {
			p.op(d, unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c)).OK = Errnos(unix.EINVAL) // past the kernel's last
		}
		p.op(d, unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0).OK = Errnos(unix.EINVAL)
		p.op(d, unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, secbitNoroot|secbitNorootLocked|secbitNoSetuidFixup|secbitNoSetuidFixupLocked|
			secbitKeepCapsLocked|secbitNoCapAmbientRaise|secbitNoCapAmbientLocked)
		hdr := p.Words(uint64(unix.LINUX_CAPABILITY_VERSION_3), 0)
		data := p.Words(0, 0, 0) // two struct __user_cap_data_struct, zero
		p.op(d, unix.SYS_CAPSET, hdr, data)
		p.op(d, unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	}
	if ruleset >= 0 {
		p.op(opDesc{step: "enter the Landlock domain"}, unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(ruleset), 0)
		p.CloseFd(ruleset)
	}
	if !drop {
		return nil
	}
	filter, err := seccomp.Program()
	if err != nil {
		return err
	}
	fprog := p.Words(uint64(len(filter)/8), uint64(p.bytes(filter, 8)))
	p.op(d, unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, fprog)
	return nil
}

// Failure explains the failure of op i (0-based) with errno as the step and error
// the launcher reports.
func (p *Program) Failure(i int, errno syscall.Errno) (step string, err error) {
	if i < 0 || i >= len(p.desc) {
		return "init", errno
	}
	d := p.desc[i]
	err = errno
	switch {
	case d.path && errno == unix.ELOOP:
		err = safepath.ErrSymlink
	case d.sameFile:
		err = ErrSourceChanged
	}
	if d.mount {
		me := d.me
		me.Err = err
		switch {
		case strings.HasPrefix(me.Op, "open_tree") && errno == unix.ENOSYS:
			// Capturing a source before it is covered needs a detached clone; there
			// is no safe way to do that with mount(2) alone inside the namespace.
			me.Hint = "the native backend needs open_tree/move_mount (Linux 5.2; a seccomp filter may hide them); use --backend bwrap, or run 'agentbox doctor'"
		case me.Op == "mount overlay":
			me.Hint = overlay.Hint(errno)
		}
		err = &me
	}
	return d.step, err
}

// OpenFds lists the descriptors open in this process (the Go init's, before it
// compiles: the runtime's own included, which the program must not reuse).
func OpenFds() (map[int]bool, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	fds := map[int]bool{}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		// The directory's own descriptor is listed too, and closed now.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
			fds[fd] = true
		}
	}
	return fds, nil
}

// haveMountSetattr probes mount_setattr(2) with an empty change.
func haveMountSetattr() bool {
	err := unix.MountSetattr(unix.AT_FDCWD, "/", 0, &unix.MountAttr{})
	return err != unix.ENOSYS
}

// Securebits (linux/securebits.h), for the privilege drop. With NOROOT locked, uid 0 gains no capabilities
// on execve: agentbox started as root still runs the command without any.
const (
	secbitNoroot              = 1 << 0
	secbitNorootLocked        = 1 << 1
	secbitNoSetuidFixup       = 1 << 2
	secbitNoSetuidFixupLocked = 1 << 3
	secbitKeepCapsLocked      = 1 << 5
	secbitNoCapAmbientRaise   = 1 << 6
	secbitNoCapAmbientLocked  = 1 << 7
)
