//go:build !race

package nsinit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
	"github.com/agentbox/agentbox/internal/ttyfilter"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/overlay"
)

// rawUsable reports whether this kernel has what the compiled plan uses without
// fallbacks: openat2 (5.6), close_range (5.9), mount_setattr (5.12, and with it
// overlayfs's userxattr, 5.11). Elsewhere the Go init runs the plan.
var rawUsable = sync.OnceValue(func() bool {
	if !safepath.HaveOpenat2() {
		return false
	}
	err := unix.MountSetattr(-1, "", 0, &unix.MountAttr{})
	return err != unix.ENOSYS
})

// RawInitAvailable reports whether launches that ask for it (Options.RawInit) run
// the raw init: on amd64, with this kernel, in a build without the race detector
// (rawlaunch_other_linux.go says why).
func RawInitAvailable() bool { return rawUsable() }

// rawInit is 1 while a raw init is being started or runs, until it is reaped: it
// shares this process's memory, which it makes non-dumpable. One at a time: a second
// launch meanwhile gets the Go init.
var rawInit atomic.Int32

// rawAcquire reserves the raw init for one launch; rawRelease gives it back (when
// the init was reaped, or never started). The process is made dumpable again first:
// a non-dumpable process's /proc files belong to root, and the new init could not
// write its own id maps; the init makes the memory non-dumpable again before the
// sandbox has any code running.
func rawAcquire() bool {
	if !rawUsable() || !rawInit.CompareAndSwap(0, 1) {
		return false
	}
	if unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0) != nil {
		rawRelease()
		return false
	}
	return true
}

// rawRelease runs once no raw init shares this process's memory (it was reaped, or
// never started). The init made the shared memory non-dumpable; the launcher is
// made dumpable again as it was before, since a non-dumpable process's children
// start with root-owned /proc files: the kernel probe that explains a failed launch
// (session's explainRefusal) could not write its child's id maps, and blamed user
// namespaces for a mount error.
func rawRelease() {
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0)
	rawInit.Store(0)
}

// runRaw runs plan under the raw init (rawinit_linux_amd64.go). ok is false when it
// cannot here (a kernel without the calls it needs, a plan too large for its arena,
// a source it cannot stat), and the caller then runs the Go init; res and err are
// the session's otherwise.
func runRaw(plan mounts.Plan, opts Options) (res Result, err error, ok bool) {
	if !rawAcquire() {
		return res, nil, false
	}
	prog, err := compileRaw(plan, opts.env(), rawGated(opts))
	if err != nil {
		rawRelease()
		return res, nil, false
	}
	runtime.LockOSThread() // Pdeathsig: the init dies with this thread
	defer runtime.UnlockOSThread()
	ctl, child, err := ControlSocket()
	if err != nil {
		rawRelease()
		return res, err, true
	}
	defer ctl.Close()
	conn := &rawConn{ctl: ctl, prog: prog}
	start := func(fg bool) (*process, error) {
		defer child.Close()
		return prog.start(child, opts.Stdio, fg, cloneFlags(plan))
	}
	res, err = Supervise(Launch{Start: start, Ctl: ctl, Plan: plan, conn: conn, gated: rawGated(opts)}, gateOpts(opts))
	return res, err, true
}

// rawGated: the raw init waits, its sandbox built, before it starts the command:
// for Options.BeforeExec, and for AfterStart, which must act before the command
// exists (the raw init runs its plan from the clone on).
func rawGated(opts Options) bool { return opts.BeforeExec != nil || opts.AfterStart != nil }

// gateOpts gives a gated launch a BeforeExec, so that Supervise sends the go.
func gateOpts(opts Options) Options {
	if opts.BeforeExec == nil && opts.AfterStart != nil {
		opts.BeforeExec = func() error { return nil }
	}
	return opts
}

// rawProgram is a compiled plan: the arena the raw init runs, and what the launcher
// needs to explain its reports.
type rawProgram struct {
	mem   []byte // the mapping; never unmapped (the init may outlive a failed launch)
	a     *rawArena
	strs  []byte // the arena's string area, and how much of it is used
	used  int
	desc  []rawDesc // per op
	marks []string  // per timestamp slot, from slot 2 (slot 1: the child's start)
	cmd   string
	paths []string
	// phaseFrom is the first timestamp reported as a phase: a prestarted init's
	// own start and wait are not part of its launch.
	phaseFrom int
	fds       map[int]bool // the init's descriptor table, as the ops leave it
	root      int          // the init's descriptor of "/"
}

// rawDesc says what an op is, for the error report of its failure.
type rawDesc struct {
	step  string
	mount bool       // me is the report's template, its Err the errno (else the errno alone)
	me    MountError // by value: a launch compiles a few hundred of these
	path  bool       // an openat2: ELOOP means a symlink in the path
	// sameFile: a rawSameFile check; its failure means ErrSourceChanged
	sameFile bool
}

// compileRaw turns plan into system calls. It mirrors the Go init (init_linux.go,
// mount_linux.go) step by step; the differences are in the README's design notes.
func compileRaw(plan mounts.Plan, env []string, gated bool) (*rawProgram, error) {
	p, err := newRawProgram(stringsSize(env, plan.Command))
	if err != nil {
		return nil, err
	}
	p.compileIDMap()
	if err := p.compilePlan(plan, env, gated); err != nil {
		p.free()
		return nil, err
	}
	return p, nil
}

// stringsSize is the room the arena's strings need: the command's argv and
// environment, and a margin for the plan's paths.
func stringsSize(env, argv []string) int {
	n := 1 << 20
	for _, ss := range [][]string{env, argv} {
		for _, s := range ss {
			n += len(s) + 9
		}
	}
	return n
}

// newRawProgram maps an arena with strBytes of room for strings and two stacks.
func newRawProgram(strBytes int) (*rawProgram, error) {
	headSize := (int(unsafe.Sizeof(rawArena{})) + 4095) &^ 4095
	size := headSize + (strBytes+4095)&^4095 + 2*rawStack
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("raw init arena: %w", err)
	}
	p := &rawProgram{mem: mem, a: (*rawArena)(unsafe.Pointer(&mem[0])), strs: mem[headSize : size-2*rawStack],
		fds: map[int]bool{0: true, 1: true, 2: true, controlFd: true}, desc: make([]rawDesc, 0, 512)}
	a := p.a
	a.initMask = sigbit(unix.SIGCHLD) | sigbit(unix.SIGTTOU)
	a.cmdStack = uintptr(unsafe.Pointer(&mem[size-16])) // the second stack's top
	a.poll[0] = unix.PollFd{Fd: controlFd, Events: unix.POLLIN}
	a.nap = unix.Timespec{Nsec: 10e6}
	return p, nil
}

// compileIDMap: the init's own uid and gid map (writeOwnIDMaps), setgroups denied
// first, and the init non-dumpable.
func (p *rawProgram) compileIDMap() {
	maps := rawDesc{step: "map uid and gid"}
	for _, w := range [][2]string{
		{"/proc/self/setgroups", "deny"},
		{"/proc/self/uid_map", fmt.Sprintf("%d %d 1", os.Getuid(), os.Getuid())},
		{"/proc/self/gid_map", fmt.Sprintf("%d %d 1", os.Getgid(), os.Getgid())},
	} {
		fd := p.fdOp(maps, unix.SYS_OPENAT, uintptr(atFDCWD), p.str(w[0]), unix.O_WRONLY|unix.O_CLOEXEC, 0)
		p.op(maps, unix.SYS_WRITE, uintptr(fd), p.str(w[1]), uintptr(len(w[1])))
		p.closeFd(fd)
	}
	p.op(rawDesc{step: "set init non-dumpable"}, unix.SYS_PRCTL, unix.PR_SET_DUMPABLE, 0)
	p.mark("idmap")
}

// compileWait makes the init wait, after its id maps, for a record saying that the
// rest of its system calls are in place (PrestartRaw).
func (p *rawProgram) compileWait() {
	p.waitGo("receive plan", "wait for plan")
	p.phaseFrom = len(p.marks)
}

// waitGo makes the init wait for the launcher's recGo. Anything but a full record
// of that kind (the launcher closing the socket) ends it. Nothing else can come
// first: the launcher forwards signals only once it has sent its last recGo
// (Supervise).
func (p *rawProgram) waitGo(step, phase string) {
	p.op(rawDesc{step: step}, unix.SYS_READ, controlFd, uintptr(unsafe.Pointer(&p.a.in[0])), 8).fd = 8 + 1
	p.op(rawDesc{step: step}, rawIsGo)
	p.mark(phase)
}

// compilePlan appends the plan's system calls, and the command's argv, environment
// and paths.
func (p *rawProgram) compilePlan(plan mounts.Plan, env []string, gated bool) error {
	if len(plan.Command) == 0 {
		return errors.New("no command")
	}
	p.cmd = plan.Command[0]
	if err := p.compile(plan, gated); err != nil {
		return err
	}
	a := p.a
	a.sfd = uintptr(p.newFd())
	a.poll[1] = unix.PollFd{Fd: int32(a.sfd), Events: unix.POLLIN}
	var err error
	if a.argv, err = p.strArray(plan.Command); err == nil {
		a.envv, err = p.strArray(env)
	}
	if err == nil {
		err = p.candidates(plan.Command[0], getenv(env, "PATH"))
	}
	return err
}

// free unmaps a program no init has started from.
func (p *rawProgram) free() { _ = unix.Munmap(p.mem) }

func sigbit(s syscall.Signal) uint64 { return 1 << (uint(s) - 1) }

var errArenaFull = errors.New("raw init: plan too large")

// str places s, NUL-terminated, in the arena and returns its address.
func (p *rawProgram) str(s string) uintptr {
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

// bytes places b in the arena, aligned, and returns its address (0 when full, which
// compile checks once at the end).
func (p *rawProgram) bytes(b []byte, align int) uintptr {
	off := (p.used + align - 1) &^ (align - 1)
	if off+len(b) > len(p.strs) {
		p.used = len(p.strs) + 1
		return 0
	}
	copy(p.strs[off:], b)
	p.used = off + len(b)
	return uintptr(unsafe.Pointer(&p.strs[off]))
}

// words places a struct of machine words in the arena.
func (p *rawProgram) words(w ...uint64) uintptr {
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

func (p *rawProgram) strArray(ss []string) (uintptr, error) {
	ptrs := make([]uint64, len(ss)+1)
	for i, s := range ss {
		if strings.IndexByte(s, 0) >= 0 {
			return 0, fmt.Errorf("NUL in %q", s)
		}
		ptrs[i] = uint64(p.str(s))
	}
	return p.words(ptrs...), nil
}

// candidates are the paths the command may be at, as lookPath would try them.
func (p *rawProgram) candidates(name, pathEnv string) error {
	if strings.Contains(name, "/") {
		p.paths = []string{name}
	} else {
		if pathEnv == "" {
			pathEnv = "/usr/local/bin:/usr/bin:/bin"
		}
		for _, dir := range filepath.SplitList(pathEnv) {
			if dir == "" {
				dir = "."
			}
			p.paths = append(p.paths, filepath.Join(dir, name))
		}
	}
	if len(p.paths) > rawMaxPaths {
		return errArenaFull
	}
	for i, c := range p.paths {
		p.a.paths[i] = p.str(c)
	}
	p.a.npaths = uintptr(len(p.paths))
	if p.used > len(p.strs) {
		return errArenaFull
	}
	return nil
}

// newFd is the descriptor the kernel gives the next open: the lowest free one.
func (p *rawProgram) newFd() int {
	for fd := 0; ; fd++ {
		if !p.fds[fd] {
			p.fds[fd] = true
			return fd
		}
	}
}

// op appends a system call described by d.
func (p *rawProgram) op(d rawDesc, nr uintptr, args ...uintptr) *rawOp {
	a := p.a
	if a.nops >= rawMaxOps {
		p.used = len(p.strs) + 1 // reported as a full arena
		return &rawOp{}
	}
	op := &a.ops[a.nops]
	*op = rawOp{nr: nr}
	copy(op.args[:], args)
	a.nops++
	p.desc = append(p.desc, d)
	return op
}

// fdOp appends a call that returns a new descriptor, and returns its number.
func (p *rawProgram) fdOp(d rawDesc, nr uintptr, args ...uintptr) int {
	op := p.op(d, nr, args...)
	fd := p.newFd()
	op.fd = uintptr(fd) + 1
	return fd
}

func (p *rawProgram) closeFd(fd int) {
	p.op(rawDesc{step: "close"}, unix.SYS_CLOSE, uintptr(fd))
	delete(p.fds, fd)
}

// mark times everything since the previous mark as name.
func (p *rawProgram) mark(name string) {
	if p.a.nops == 0 || len(p.marks)+2 > rawMaxMarks {
		return
	}
	p.marks = append(p.marks, name)
	p.a.ops[p.a.nops-1].mark = uintptr(len(p.marks) + 1)
}

var atFDCWD = unix.AT_FDCWD

// openBeneath opens abs from the init's root without following a symlink (safepath).
func (p *rawProgram) openBeneath(d rawDesc, abs string, flags int) int {
	rel := strings.Trim(abs, "/")
	if rel == "" {
		rel = "."
	}
	d.path = true
	how := p.words(uint64(flags|unix.O_CLOEXEC), 0, unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
	return p.fdOp(d, unix.SYS_OPENAT2, uintptr(p.root), p.str(rel), how, 24)
}

// mkdirAll opens dest, creating what is missing of it, one component at a time and
// never through a symlink (safepath.MkdirAll); an existing component is left as it is.
func (p *rawProgram) mkdirAll(dest string) int {
	d := rawDesc{step: "mount", mount: true, me: MountError{Op: "create mount point", Target: dest}}
	comps := strings.Split(strings.Trim(dest, "/"), "/")
	cur := p.root
	for i, c := range comps {
		if c == "" {
			continue
		}
		p.op(d, unix.SYS_MKDIRAT, uintptr(cur), p.str(c), 0o755).ok = uintptr(unix.EEXIST)
		flags := unix.O_PATH | unix.O_DIRECTORY
		if i == len(comps)-1 {
			flags = unix.O_PATH // the mount point may be a file
		}
		how := p.words(uint64(flags|unix.O_CLOEXEC), 0, unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
		dp := d
		dp.path = true
		next := p.fdOp(dp, unix.SYS_OPENAT2, uintptr(cur), p.str(c), how, 24)
		if cur != p.root {
			p.closeFd(cur)
		}
		cur = next
	}
	if cur == p.root {
		return p.fdOp(d, unix.SYS_OPENAT, uintptr(p.root), p.str("."), unix.O_PATH|unix.O_CLOEXEC, 0)
	}
	return cur
}

func (p *rawProgram) compile(plan mounts.Plan, gated bool) error {
	p.root = p.fdOp(rawDesc{step: "mount", mount: true, me: MountError{Op: "open", Target: "/"}}, unix.SYS_OPENAT, uintptr(atFDCWD), p.str("/"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	p.op(rawDesc{step: "mount", mount: true, me: MountError{Op: "make-rslave", Target: "/", Flags: unix.MS_SLAVE | unix.MS_REC}},
		unix.SYS_MOUNT, p.str(""), p.str("/"), p.str(""), unix.MS_SLAVE|unix.MS_REC, 0)

	// Capture every host source before any mount covers it (mount_linux.go).
	caps := make([]captured, len(plan.Ops))
	for i, op := range plan.Ops {
		c := captured{tree: -1, fd: -1}
		switch {
		case isRootRO(op):
		case op.Kind == mounts.Bind || op.Kind == mounts.BindRO:
			c.tree = p.cloneTree(op.Source, op.SourceID)
		case op.Kind == mounts.Overlay:
			c.fd = p.openBeneath(rawDesc{step: "mount", mount: true, me: MountError{Op: "open overlay lower", Source: op.Source}}, op.Source, unix.O_PATH|unix.O_DIRECTORY)
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
	if plan.Namespaces.Net {
		d := rawDesc{step: "bring up loopback"}
		sock := p.fdOp(d, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		ifr := make([]byte, unix.IFNAMSIZ+24)
		copy(ifr, "lo")
		*(*uint16)(unsafe.Pointer(&ifr[unix.IFNAMSIZ])) = unix.IFF_UP | unix.IFF_LOOPBACK
		p.op(d, unix.SYS_IOCTL, uintptr(sock), unix.SIOCSIFFLAGS, p.bytes(ifr, 8))
		p.closeFd(sock)
	}
	p.op(rawDesc{step: "chdir " + plan.Workdir}, unix.SYS_CHDIR, p.str(plan.Workdir))
	// Every descriptor of the setup goes; 0–2 and the control socket stay.
	p.op(rawDesc{step: "close descriptors"}, unix.SYS_CLOSE_RANGE, initFds, 0xffffffff, 0)
	p.fds = map[int]bool{0: true, 1: true, 2: true, controlFd: true}
	if err := p.dropPrivileges(plan.ScopeAbstractUnix); err != nil {
		return err
	}
	p.mark("drop-privileges")
	if gated {
		// Options.BeforeExec: the sandbox is built; the command waits for the
		// launcher's host work.
		p.waitGo(PhaseGate, PhaseGate)
	}
	p.marks = append(p.marks, "exec-command")
	p.a.markExec = uintptr(len(p.marks) + 1)
	if p.used > len(p.strs) {
		return errArenaFull
	}
	return nil
}

// cloneTree captures the mount tree at path (mount_linux.go's cloneTree), checking
// that it has the identity want (zero: unchecked).
func (p *rawProgram) cloneTree(path string, want mounts.FileID) int {
	d := rawDesc{step: "mount", mount: true, me: MountError{Op: "open", Source: path}}
	fd := p.openBeneath(d, path, unix.O_PATH)
	if want != (mounts.FileID{}) {
		p.op(d, unix.SYS_FSTAT, uintptr(fd), uintptr(unsafe.Pointer(&p.a.srcStat)))
		d.sameFile = true
		p.op(d, rawSameFile, uintptr(want.Dev), uintptr(want.Ino))
	}
	tree := p.fdOp(rawDesc{step: "mount", mount: true, me: MountError{Op: "open_tree", Source: path}}, unix.SYS_OPEN_TREE, uintptr(fd), p.str(""),
		unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
	p.closeFd(fd)
	return tree
}

func (p *rawProgram) rdonly() uintptr { return p.words(unix.MOUNT_ATTR_RDONLY, 0, 0, 0) }

func (p *rawProgram) apply(op mounts.Op, c captured) error {
	mountDesc := func(me MountError) rawDesc { return rawDesc{step: "mount", mount: true, me: me} }
	switch op.Kind {
	case mounts.BindRO:
		if isRootRO(op) {
			p.op(mountDesc(MountError{Op: "mount_setattr rdonly", Target: "/"}), unix.SYS_MOUNT_SETATTR, uintptr(atFDCWD), p.str("/"), unix.AT_RECURSIVE, p.rdonly(), 32)
			return nil
		}
		p.op(mountDesc(MountError{Op: "mount_setattr rdonly", Source: op.Source}), unix.SYS_MOUNT_SETATTR, uintptr(c.tree), p.str(""), unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, p.rdonly(), 32)
		dest := p.openBeneath(mountDesc(MountError{Op: "open mount point", Target: op.Dest}), op.Dest, unix.O_PATH)
		p.moveMount(op, c.tree, dest)
	case mounts.Bind:
		p.moveMount(op, c.tree, p.mkdirAll(op.Dest))
	case mounts.Tmpfs:
		p.mountAt(op.Dest, "tmpfs", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("mode=%04o", op.Mode))
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
		tree := p.fdOp(mountDesc(MountError{Op: "open_tree", Source: op.Dest}), unix.SYS_OPEN_TREE, uintptr(dest), p.str(""),
			unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
		p.cover(op, tree, dest)
	case mounts.Mask:
		switch coverKind(op.Dest) {
		case coverDir:
			fd := p.openBeneath(mountDesc(MountError{Op: "open mount point", Target: op.Dest}), op.Dest, unix.O_PATH|unix.O_DIRECTORY)
			flags := uintptr(unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
			p.op(mountDesc(MountError{Op: "mount tmpfs", Target: op.Dest, Flags: flags, Data: "mode=0555"}), unix.SYS_MOUNT,
				p.str("tmpfs"), p.str(safepath.FdPath(fd)), p.str("tmpfs"), flags, p.str("mode=0555"))
			p.closeFd(fd)
		case coverFile:
			p.cover(mounts.Op{Source: "/dev/null", Dest: op.Dest}, c.tree, p.openBeneath(mountDesc(MountError{Op: "open mount point", Target: op.Dest}), op.Dest, unix.O_PATH))
		}
	default:
		return fmt.Errorf("unknown mount operation %q for %s", op.Kind, op.Dest)
	}
	return nil
}

// What a ReadOnly or Mask destination is. The raw init is compiled before it runs,
// so it looks at the launcher's view of the path: these are kernel-global files of
// /proc and /sys, the same in the sandbox's fresh proc and the host's (compat does
// the same for bwrap).
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

// cover makes tree read-only and moves it onto dest (mount_linux.go's cover).
func (p *rawProgram) cover(op mounts.Op, tree, dest int) {
	p.op(rawDesc{step: "mount", mount: true, me: MountError{Op: "mount_setattr rdonly", Source: op.Source, Target: op.Dest}},
		unix.SYS_MOUNT_SETATTR, uintptr(tree), p.str(""), unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, p.rdonly(), 32)
	p.moveMount(op, tree, dest)
	p.closeFd(tree)
}

func (p *rawProgram) moveMount(op mounts.Op, tree, dest int) {
	p.op(rawDesc{step: "mount", mount: true, me: MountError{Op: "move_mount", Source: op.Source, Target: op.Dest}}, unix.SYS_MOVE_MOUNT,
		uintptr(tree), p.str(""), uintptr(dest), p.str(""), unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
	p.closeFd(dest)
}

// mountAt mounts a new filesystem at dest through a descriptor of the mount point.
func (p *rawProgram) mountAt(dest, fstype, source string, flags uintptr, data string) {
	fd := p.mkdirAll(dest)
	var dataPtr uintptr
	if data != "" {
		dataPtr = p.str(data)
	}
	p.op(rawDesc{step: "mount", mount: true, me: MountError{Op: "mount " + fstype, Target: dest, Flags: flags, Data: data}}, unix.SYS_MOUNT,
		p.str(source), p.str(safepath.FdPath(fd)), p.str(fstype), flags, dataPtr)
	p.closeFd(fd)
}

// dev builds the minimal /dev (mount_linux.go's dev).
func (p *rawProgram) dev(dest string, nodes map[string]int) {
	p.mountAt(dest, "tmpfs", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755")
	dir := p.openBeneath(rawDesc{step: "mount", mount: true, me: MountError{Op: "open", Target: dest}}, dest, unix.O_PATH|unix.O_DIRECTORY)
	for _, name := range devNodes {
		tree, ok := nodes[name]
		if !ok {
			continue
		}
		f := p.fdOp(rawDesc{step: "mount", mount: true, me: MountError{Op: "create", Target: dest + "/" + name}}, unix.SYS_OPENAT, uintptr(dir), p.str(name), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o666)
		p.closeFd(f)
		p.op(rawDesc{step: "mount", mount: true, me: MountError{Op: "move_mount", Source: "/dev/" + name, Target: dest + "/" + name}}, unix.SYS_MOVE_MOUNT,
			uintptr(tree), p.str(""), uintptr(dir), p.str(name), unix.MOVE_MOUNT_F_EMPTY_PATH)
	}
	for _, d := range []string{"pts", "shm"} {
		p.op(rawDesc{step: "mount", mount: true, me: MountError{Op: "mkdir", Target: dest + "/" + d}}, unix.SYS_MKDIRAT, uintptr(dir), p.str(d), 0o755)
	}
	p.mountAt(dest+"/pts", "devpts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")
	p.mountAt(dest+"/shm", "tmpfs", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777")
	for _, l := range [][2]string{
		{"pts/ptmx", "ptmx"}, {"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"},
		{"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}, {"/proc/kcore", "core"},
	} {
		p.op(rawDesc{step: "mount", mount: true, me: MountError{Op: "symlink", Target: dest + "/" + l[1]}}, unix.SYS_SYMLINKAT, p.str(l[0]), uintptr(dir), p.str(l[1]))
	}
	p.closeFd(dir)
}

// overlay mounts HOME's overlay (mount_linux.go's overlay). The upper dir's owner and
// mode are the lower dir's, as the host shows them now (overlay.UpperFor). Only
// kernels from 5.12 run this init, so the mount needs no retry (overlay.Fallback).
func (p *rawProgram) overlay(op mounts.Op, lower int) error {
	// Looked at as the capture opens it: without following a symlink on the way.
	fd, err := safepath.Open(op.Source, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	unix.Close(fd)
	if err != nil {
		return err
	}
	p.mountAt(op.Dest, "tmpfs", "tmpfs", overlay.Flags, fmt.Sprintf("mode=%04o", overlay.ScratchMode))
	scratch := p.openBeneath(rawDesc{step: "mount", mount: true, me: MountError{Op: "open overlay scratch", Target: op.Dest}}, op.Dest, unix.O_PATH|unix.O_DIRECTORY)
	for _, d := range []string{overlay.UpperDir, overlay.WorkDir} {
		p.op(rawDesc{step: "mount", mount: true, me: MountError{Op: "mkdir overlay " + d, Target: op.Dest}}, unix.SYS_MKDIRAT, uintptr(scratch), p.str(d), overlay.ScratchMode)
	}
	up := overlay.UpperFor(overlay.Attr{UID: st.Uid, GID: st.Gid, Mode: st.Mode}, os.Getuid(), os.Getgid())
	if up.Chown {
		p.op(rawDesc{step: "mount", mount: true, me: MountError{Op: "chown overlay upper", Target: op.Dest}}, unix.SYS_FCHOWNAT,
			uintptr(scratch), p.str(overlay.UpperDir), uintptr(st.Uid), uintptr(st.Gid), unix.AT_SYMLINK_NOFOLLOW)
	}
	p.op(rawDesc{step: "mount", mount: true, me: MountError{Op: "chmod overlay upper", Target: op.Dest}}, unix.SYS_FCHMODAT, uintptr(scratch), p.str(overlay.UpperDir), uintptr(up.Mode))
	dir := safepath.FdPath(scratch) + "/"
	p.mountAt(op.Dest, "overlay", "overlay", overlay.Flags, overlay.Options([]string{safepath.FdPath(lower)}, dir+overlay.UpperDir, dir+overlay.WorkDir))
	return nil
}

// dropPrivileges is privs_linux.go's dropPrivileges as system calls, with
// landlock_linux.go's scopeAbstractUnix when scope is set (after no_new_privs,
// which Landlock needs).
func (p *rawProgram) dropPrivileges(scope bool) error {
	d := rawDesc{step: "drop privileges"}
	for c := 0; c <= 63; c++ {
		p.op(d, unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c)).ok = uintptr(unix.EINVAL) // past the kernel's last
	}
	p.op(d, unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0).ok = uintptr(unix.EINVAL)
	p.op(d, unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, secbitNoroot|secbitNorootLocked|secbitNoSetuidFixup|secbitNoSetuidFixupLocked|
		secbitKeepCapsLocked|secbitNoCapAmbientRaise|secbitNoCapAmbientLocked)
	hdr := p.words(uint64(unix.LINUX_CAPABILITY_VERSION_3), 0)
	data := p.words(0, 0, 0) // two struct __user_cap_data_struct, zero
	p.op(d, unix.SYS_CAPSET, hdr, data)
	p.op(d, unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	if scope {
		ds := rawDesc{step: "scope abstract Unix sockets"}
		attr := p.words(0, 0, mounts.LandlockScopeAbstractUnix) // struct landlock_ruleset_attr
		fd := p.fdOp(ds, unix.SYS_LANDLOCK_CREATE_RULESET, attr, mounts.LandlockRulesetAttrSize, 0)
		p.op(ds, unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(fd), 0)
		p.closeFd(fd)
	}
	filter, err := ttyfilter.Program()
	if err != nil {
		return err
	}
	fprog := p.words(uint64(len(filter)/8), uint64(p.bytes(filter, 8)))
	p.op(d, unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, fprog)
	return nil
}

// start clones the raw init with stdio and ctl as its descriptors 0–2 and controlFd.
// The raw init's reservation (rawAcquire) goes with the init, or now if none started.
func (p *rawProgram) start(ctl *os.File, stdio Stdio, fg bool, flags uintptr) (proc *process, err error) {
	defer func() {
		if err != nil {
			rawRelease()
		}
	}()
	files, closeNull, err := stdioFiles(stdio)
	if err != nil {
		return nil, err
	}
	defer closeNull()
	a := p.a
	if fg {
		a.fg = 1
	}
	for i, f := range append(files, ctl) {
		a.fds[i] = f.Fd()
		a.nextfd = max(a.nextfd, a.fds[i]+1)
	}
	a.nextfd = max(a.nextfd, initFds)
	a.flags = flags | uintptr(unix.CLONE_VM) | uintptr(unix.SIGCHLD)
	stack := uintptr(unsafe.Pointer(&p.mem[len(p.mem)-rawStack-16])) // the first stack's top
	pid, errno := rawStartInit(a, stack)
	runtime.KeepAlive(files)
	runtime.KeepAlive(ctl)
	if errno != 0 {
		return nil, fmt.Errorf("clone: %w", errno)
	}
	return childProcess(pid, rawRelease), nil
}

// rawStartInit clones the raw init, with every signal blocked for the clone (the
// child must not run a Go handler before it has reset them).
//
//go:noinline
//go:nosplit
//go:norace
func rawStartInit(a *rawArena, stack uintptr) (int, syscall.Errno) {
	runtimeBeforeFork()
	pid, errno := rawClone(a.flags, stack, uintptr(unsafe.Pointer(a)), 0)
	runtimeAfterFork()
	return int(pid), syscall.Errno(errno)
}

// rawConn is the launcher's side of the raw init's records.
type rawConn struct {
	ctl      *os.File
	prog     *rawProgram
	reported bool
}

// rawControl is conn's control socket when conn is a raw init's, else nil.
func rawControl(conn initConn) *os.File {
	if c, ok := conn.(*rawConn); ok {
		return c.ctl
	}
	return nil
}

// plan: the raw init has its plan already, compiled into its memory.
func (c *rawConn) plan(*message, ...*os.File) error { return nil }

func (c *rawConn) read() (*message, error) {
	var rec [8]byte
	if _, err := io.ReadFull(c.ctl, rec[:]); err != nil {
		a := c.prog.a
		if !c.reported && a.errno != 0 {
			// It failed before it had its control socket (and exited).
			c.reported = true
			return c.errorMsg(), nil
		}
		return nil, err
	}
	kind := *(*uint32)(unsafe.Pointer(&rec[0]))
	value := *(*uint32)(unsafe.Pointer(&rec[4]))
	switch kind {
	case recStarted:
		return &message{Type: msgStarted, PID: int(value), Phases: c.phases()}, nil
	case recError:
		c.reported = true
		return c.errorMsg(), nil
	case recStopped:
		return &message{Type: msgStopped}, nil
	case recEnded:
		return &message{Type: msgEnded, Signal: int(value & 0xff), Left: int(value >> 8)}, nil
	case recExited:
		return &message{Type: msgExited, Status: int(int32(value))}, nil
	}
	return nil, fmt.Errorf("raw init: unknown record %d", kind)
}

func (c *rawConn) write(m *message) error {
	switch m.Type {
	case msgSignal:
		return c.send(recSignal, uint32(m.Signal))
	case msgContinue:
		if m.Foreground {
			return c.send(recContinue, 1)
		}
		return c.send(recContinue, 0)
	}
	return fmt.Errorf("raw init: cannot send %q", m.Type)
}

// sendGo lets the init past its wait (waitGo).
func (c *rawConn) sendGo() error { return c.send(recGo, 0) }

// send writes one record: kind and value.
func (c *rawConn) send(kind, value uint32) error {
	rec := [2]uint32{kind, value}
	_, err := c.ctl.Write((*[8]byte)(unsafe.Pointer(&rec))[:])
	return err
}

// phases are the init's timestamps as the Go init's Timer phases.
func (c *rawConn) phases() []Phase {
	a := c.prog.a
	var out []Phase
	prev := a.marks[c.prog.phaseFrom]
	for i, name := range c.prog.marks[c.prog.phaseFrom:] {
		t := a.marks[c.prog.phaseFrom+i+1]
		if t == 0 || prev == 0 {
			continue
		}
		out = append(out, Phase{Name: name, Dur: time.Duration(t - prev)})
		prev = t
	}
	return out
}

// errorMsg explains the raw init's failure as the Go init would (reportSetup).
func (c *rawConn) errorMsg() *message {
	a, p := c.prog.a, c.prog
	errno := syscall.Errno(a.errno)
	m := &message{Type: msgError, Step: "init", Reason: errno.Error()}
	switch a.stage {
	case rawStagePrologue:
		m.Step = "set up init descriptors"
	case rawStageOps:
		if a.failOp == 0 || int(a.failOp) > len(p.desc) {
			break
		}
		d := p.desc[a.failOp-1]
		var err error = errno
		switch {
		case d.path && errno == unix.ELOOP:
			err = safepath.ErrSymlink
		case d.sameFile:
			err = ErrSourceChanged
		}
		if d.mount {
			me := d.me
			me.Err = err
			err = &me
		}
		m.Step, m.Reason = d.step, err.Error()
	case rawStageCommand:
		m.Step = "exec " + p.cmd
	case rawStageExec:
		m.Step = "command " + p.cmd
		switch {
		case errno == unix.ENOENT && !strings.Contains(p.cmd, "/"):
			m.Reason = "not found in PATH"
		case errno == unix.ENOENT:
			m.Reason = "not found"
		case errno == unix.EACCES && a.stat.Mode&unix.S_IFMT == unix.S_IFDIR:
			m.Reason = "is a directory"
		case errno == unix.EACCES && a.stat.Mode&0o111 == 0:
			m.Reason = "is not executable"
		case errno == unix.EACCES:
			// lookPath's own report: the errno, as "permission denied".
		default:
			m.Step = "exec " + p.cmd
		}
	}
	return m
}

// PrestartRaw clones a raw init ahead of its session (Prestarted), with the network
// namespace when net and stdio as the command's streams: its namespaces, id maps and
// descriptors are made while the launcher prepares the plan, and RunPrestarted adds
// the plan's system calls. It returns before the clone is done. nil when the raw init
// cannot run here; one that fails to start is not Usable (the launch then goes the
// usual way and reports why). Like Options.RawInit, it is for a launcher that is a
// process of its own: the init's Pdeathsig rides on an ordinary thread (prestart).
func PrestartRaw(net bool, stdio Stdio) *Prestarted {
	if !rawAcquire() {
		return nil
	}
	prog, err := newRawProgram(stringsSize(os.Environ(), nil))
	if err != nil {
		rawRelease()
		return nil
	}
	prog.compileIDMap()
	prog.compileWait()
	flags := cloneFlags(mounts.Plan{Namespaces: mounts.Namespaces{Net: net}})
	p, err := prestart(&Prestarted{net: net, raw: prog}, false, func(child *os.File) (*process, error) {
		proc, err := prog.start(child, stdio, false, flags)
		if err != nil {
			prog.free() // no init uses it
		}
		return proc, err
	})
	if err != nil {
		prog.free()
		rawRelease()
		return nil
	}
	return p // its clone runs meanwhile
}

// runPrestartedRaw completes p's program with plan and lets it go. A plan the arena
// cannot hold goes to a fresh init instead.
func runPrestartedRaw(p *Prestarted, plan mounts.Plan, opts Options) (Result, error) {
	prog := p.raw
	if err := prog.compilePlan(plan, opts.env(), rawGated(opts)); err != nil {
		p.proc.kill()
		p.proc.wait()
		return Run(plan, opts)
	}
	start := func(fg bool) (*process, error) {
		if fg {
			prog.a.fg = 1
		}
		// The init runs meanwhile, blocked in its read of the go record: everything
		// written to the shared arena above must be visible to it once that read
		// returns. The socket's write and read order them in practice; the atomic
		// store makes it the language's order too (the init loads nops atomically),
		// instead of resting on the system call as a barrier.
		atomic.StoreUintptr(&prog.a.nops, prog.a.nops)
		// A failed write means the init is gone: its report (or its exit) says why.
		conn := rawConn{ctl: p.ctl}
		_ = conn.sendGo()
		return p.proc, nil
	}
	return Supervise(Launch{Start: start, Ctl: p.ctl, Plan: plan, conn: &rawConn{ctl: p.ctl, prog: prog}, gated: rawGated(opts)}, gateOpts(opts))
}
