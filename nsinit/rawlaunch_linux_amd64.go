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
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/nsinit/program"
	"github.com/agentbox/agentbox/nsinit/protocol"
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
// (prepare.ExplainRefusal) could not write its child's id maps, and blamed user
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
	prog, err := compileRaw(plan, opts.Environ(), rawGated(opts))
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
		return prog.start(child, opts.Stdio, fg, cloneFlags(plan), cgroupFd(opts))
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

// rawProgram is a compiled plan (package program) for the raw init: its arena is a
// rawArena, with room after the strings for the init's two stacks, and the command
// it starts.
type rawProgram struct {
	*program.Program
	ra    *rawArena
	cmd   string
	paths []string
	// phaseFrom is the first mark reported as a phase: a prestarted init's own
	// start and wait are not part of its launch.
	phaseFrom int
}

// free unmaps a program no init has started from.
func (p *rawProgram) free() { _ = unix.Munmap(p.Mem) }

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

// gateName is the gate's step for a gated launch (program.Options.Gate).
func gateName(gated bool) string {
	if gated {
		return PhaseGate
	}
	return ""
}

// rawFeatures: the raw init runs only where the program needs no fallback (rawUsable).
var rawFeatures = program.Features{Openat2: true, Setattr: true}

// compileRaw turns plan into the raw init's program: its id maps, then the plan.
func compileRaw(plan mounts.Plan, env []string, gated bool) (*rawProgram, error) {
	p, err := newRawProgram(stringsSize(env, plan.Command))
	if err != nil {
		return nil, err
	}
	p.CompileIDMap(os.Getuid(), os.Getgid(), true)
	if err := p.compilePlan(plan, env, gated); err != nil {
		p.free()
		return nil, err
	}
	return p, nil
}

// newRawProgram maps an arena with strBytes of room for strings and two stacks. The
// init starts with 0–2 and the control socket (its prologue closes the rest).
func newRawProgram(strBytes int) (*rawProgram, error) {
	fds := map[int]bool{0: true, 1: true, 2: true, controlFd: true}
	prog, err := program.New(int(unsafe.Sizeof(rawArena{})), strBytes, 2*rawStack, fds, rawFeatures)
	if err != nil {
		return nil, err
	}
	p := &rawProgram{Program: prog, ra: (*rawArena)(unsafe.Pointer(&prog.Mem[0]))}
	a := p.ra
	a.initMask = sigbit(unix.SIGCHLD) | sigbit(unix.SIGTTOU)
	a.cmdStack = uintptr(unsafe.Pointer(&prog.Mem[len(prog.Mem)-16])) // the second stack's top
	a.poll[0] = unix.PollFd{Fd: controlFd, Events: unix.POLLIN}
	a.nap = unix.Timespec{Nsec: 10e6}
	return p, nil
}

// compileWait makes the init wait, after its id maps, for a record saying that the
// rest of its system calls are in place (PrestartRaw).
func (p *rawProgram) compileWait() {
	p.WaitGo("receive plan", "wait for plan")
	p.phaseFrom = len(p.Marks)
}

// compilePlan appends the plan's system calls, and the command's argv, environment
// and paths.
func (p *rawProgram) compilePlan(plan mounts.Plan, env []string, gated bool) error {
	if len(plan.Command) == 0 {
		return errors.New("no command")
	}
	p.cmd = plan.Command[0]
	if err := p.Compile(plan, program.Options{Gate: gateName(gated)}); err != nil {
		return err
	}
	p.Marks = append(p.Marks, "exec-command")
	a := p.ra
	a.markExec = uintptr(len(p.Marks) + 1)
	a.sfd = uintptr(p.NewFd())
	a.poll[1] = unix.PollFd{Fd: int32(a.sfd), Events: unix.POLLIN}
	var err error
	if a.argv, err = p.strArray(plan.Command); err == nil {
		a.envv, err = p.strArray(env)
	}
	if err == nil {
		err = p.candidates(plan.Command[0], protocol.Getenv(env, "PATH"))
	}
	return err
}

func sigbit(s syscall.Signal) uint64 { return 1 << (uint(s) - 1) }

func (p *rawProgram) strArray(ss []string) (uintptr, error) {
	ptrs := make([]uint64, len(ss)+1)
	for i, s := range ss {
		if strings.IndexByte(s, 0) >= 0 {
			return 0, fmt.Errorf("NUL in %q", s)
		}
		ptrs[i] = uint64(p.Str(s))
	}
	return p.Words(ptrs...), nil
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
		return program.ErrArenaFull
	}
	for i, c := range p.paths {
		p.ra.paths[i] = p.Str(c)
	}
	p.ra.npaths = uintptr(len(p.paths))
	if p.Full() {
		return program.ErrArenaFull
	}
	return nil
}

// start clones the raw init with stdio and ctl as its descriptors 0–2 and controlFd,
// into the cgroup open at cgroup (-1: its caller's; rawUsable's kernels all have
// CLONE_INTO_CGROUP). The raw init's reservation (rawAcquire) goes with the init, or
// now if none started.
func (p *rawProgram) start(ctl *os.File, stdio Stdio, fg bool, flags uintptr, cgroup int) (proc *process, err error) {
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
	a := p.ra
	if fg {
		a.fg = 1
	}
	for i, f := range append(files, ctl) {
		a.fds[i] = f.Fd()
		a.nextfd = max(a.nextfd, a.fds[i]+1)
	}
	a.nextfd = max(a.nextfd, initFds)
	a.flags = flags | uintptr(unix.CLONE_VM) | uintptr(unix.SIGCHLD)
	stack := uintptr(unsafe.Pointer(&p.Mem[len(p.Mem)-rawStack-16])) // the first stack's top
	var args *cloneArgs
	if cgroup >= 0 {
		args = cgroupArgs(a.flags, cgroup)
		base := uintptr(unsafe.Pointer(&p.Mem[len(p.Mem)-2*rawStack]))
		args.stack, args.stackSize = uint64(base), uint64(stack-base)
	}
	pid, errno := rawStartInit(a, stack, args)
	runtime.KeepAlive(files)
	runtime.KeepAlive(ctl)
	if errno != 0 {
		return nil, fmt.Errorf("clone: %w", errno)
	}
	return childProcess(pid, rawRelease), nil
}

// rawStartInit clones the raw init, with every signal blocked for the clone (the
// child must not run a Go handler before it has reset them): through clone3 with
// args when set.
//
//go:noinline
//go:nosplit
//go:norace
func rawStartInit(a *rawArena, stack uintptr, args *cloneArgs) (int, syscall.Errno) {
	runtimeBeforeFork()
	var pid, errno uintptr
	if args != nil {
		pid, errno = rawClone3(args, uintptr(unsafe.Pointer(a)), 0)
	} else {
		pid, errno = rawClone(a.flags, stack, uintptr(unsafe.Pointer(a)), 0)
	}
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

// continueStops tells the raw init, before it starts, whether it continues a
// stopped command itself (protocol.Message.Continue).
func (c *rawConn) continueStops(on bool) {
	c.prog.ra.cont = 0
	if on {
		c.prog.ra.cont = 1
	}
}

// plan: the raw init has its plan already, compiled into its memory.
func (c *rawConn) plan(*protocol.Message, ...*os.File) error { return nil }

func (c *rawConn) read() (*protocol.Message, error) {
	var rec [8]byte
	if _, err := io.ReadFull(c.ctl, rec[:]); err != nil {
		a := c.prog.ra
		if !c.reported && a.Errno != 0 {
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
		return &protocol.Message{Type: protocol.MsgStarted, PID: int(value), Phases: c.phases()}, nil
	case recError:
		c.reported = true
		return c.errorMsg(), nil
	case recStopped:
		return &protocol.Message{Type: protocol.MsgStopped}, nil
	case recEnded:
		return &protocol.Message{Type: protocol.MsgEnded, Signal: int(value & 0xff), Left: int(value >> 8)}, nil
	case recExited:
		return &protocol.Message{Type: protocol.MsgExited, Status: int(int32(value))}, nil
	}
	return nil, fmt.Errorf("raw init: unknown record %d", kind)
}

func (c *rawConn) write(m *protocol.Message) error {
	switch m.Type {
	case protocol.MsgSignal:
		return c.send(recSignal, uint32(m.Signal))
	case protocol.MsgContinue:
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
	a := c.prog.ra
	var out []Phase
	prev := a.Times[c.prog.phaseFrom]
	for i, name := range c.prog.Marks[c.prog.phaseFrom:] {
		t := a.Times[c.prog.phaseFrom+i+1]
		if t == 0 || prev == 0 {
			continue
		}
		out = append(out, Phase{Name: name, Dur: time.Duration(t - prev)})
		prev = t
	}
	return out
}

// errorMsg explains the raw init's failure as the Go init would (reportSetup).
func (c *rawConn) errorMsg() *protocol.Message {
	a, p := c.prog.ra, c.prog
	errno := syscall.Errno(a.Errno)
	m := &protocol.Message{Type: protocol.MsgError, Step: "init", Reason: errno.Error()}
	switch a.stage {
	case rawStagePrologue:
		m.Step = "set up init descriptors"
	case rawStageOps:
		if a.FailOp == 0 {
			break
		}
		step, err := p.Failure(int(a.FailOp-1), errno)
		m.Step, m.Reason = step, err.Error()
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
	prog.CompileIDMap(os.Getuid(), os.Getgid(), true)
	prog.compileWait()
	flags := cloneFlags(mounts.Plan{Namespaces: mounts.Namespaces{Net: net}})
	p, err := prestart(&Prestarted{net: net, raw: prog}, false, func(child *os.File) (*process, error) {
		proc, err := prog.start(child, stdio, false, flags, -1)
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
	if err := prog.compilePlan(plan, opts.Environ(), rawGated(opts)); err != nil {
		p.proc.kill()
		p.proc.wait()
		return Run(plan, opts)
	}
	start := func(fg bool) (*process, error) {
		if err := p.place(opts); err != nil {
			return nil, err
		}
		if fg {
			prog.ra.fg = 1
		}
		// The init runs meanwhile, blocked in its read of the go record: everything
		// written to the shared arena above must be visible to it once that read
		// returns. The socket's write and read order them in practice; the atomic
		// store makes it the language's order too (the init loads nops atomically),
		// instead of resting on the system call as a barrier.
		atomic.StoreUintptr(&prog.ra.Nops, prog.ra.Nops)
		// A failed write means the init is gone: its report (or its exit) says why.
		conn := rawConn{ctl: p.ctl}
		_ = conn.sendGo()
		return p.proc, nil
	}
	return Supervise(Launch{Start: start, Ctl: p.ctl, Plan: plan, conn: &rawConn{ctl: p.ctl, prog: prog}, gated: rawGated(opts)}, gateOpts(opts))
}
