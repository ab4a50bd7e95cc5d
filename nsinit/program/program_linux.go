package program

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
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
	ptyMax   int64  // the devpts instance's max= (mounts.Plan.PtyMax), 0: none
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
