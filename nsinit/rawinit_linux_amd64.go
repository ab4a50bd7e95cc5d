//go:build !race

package nsinit

import (
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/nsinit/program"
)

// The raw init: PID 1 without a Go runtime of its own.
//
// The re-executed init pays for a second Go process on every launch: the execve of
// the agentbox binary, the runtime's start-up and every package's init, before it
// does any work. The raw init does the same work without that start: the launcher compiles the plan
// into a list of system calls (package program), clones a child that shares its
// memory (CLONE_VM, not CLONE_VFORK: the child lives for the whole session) on a stack
// of its own, and the child runs the list, starts the command with a vfork and stays
// as PID 1: it reaps, passes the launcher's signals on, mirrors job control and
// reports the command's end, as the Go init does.
//
// The child runs Go code compiled for it under the rules of a vfork child, for its
// whole life: nosplit functions only (its stack is not a goroutine's), no
// allocation, no pointer stores (no write barrier may run: the launcher's GC does not
// know this process), raw system calls only, and nothing but the arena below, which
// lives outside the Go heap and is never unmapped. It holds no Go signal handler:
// every signal is blocked from the clone (runtime_BeforeFork) until it has reset
// every disposition to the default.
//
// Sharing the launcher's memory with a process inside the sandbox is safe because
// that memory is out of the sandbox's reach: the shared mm is made non-dumpable
// first, and it belongs to the host's user namespace, so neither ptrace nor
// /proc/1/mem nor process_vm_readv can open it from inside (ptrace_may_access wants
// CAP_SYS_PTRACE there). It makes the launcher non-dumpable too, which is why only a
// launcher that is a process of its own (the CLI) asks for it (Options.RawInit); the
// Go API keeps the Go init.

const (
	rawMaxPaths = 128
	rawStack    = 64 << 10
)

// Stages of the raw init, for its error report.
const (
	rawStagePrologue = 1 + iota
	rawStageOps
	rawStageCommand
	rawStageExec
)

// Records on the control socket, 8 bytes: kind and value (uint32 each).
const (
	recStarted  = 1 + iota // value: the command's PID in the sandbox
	recError               // details in the arena
	recStopped             // the command stopped (job control)
	recExited              // value: the command's status; everything of the session is gone
	recSignal              // launcher to init: value is a signal for the command
	recContinue            // launcher to init: value 1 when the launcher is in the foreground
	recGo                  // launcher to init: the plan is in the arena (PrestartRaw), or
	// the command may start (Options.BeforeExec returned); read by a compiled read op
	recEnded // before recExited: the signal that killed the command (0: it exited) in
	// the low 8 bits, above them the number of processes left running and killed
)

// The raw signal handler (signals_linux_amd64.s) writes recSignal as a constant.
var _ = [1]struct{}{}[recSignal-5]

// rawArena is all the memory the raw init touches: the program's arena, then what
// only this runner needs. No Go pointers, only addresses as uintptr, in an anonymous
// mapping of the launcher (newRawProgram).
type rawArena struct {
	program.Arena // first: the Program's A points at it

	// Set by the launcher before the clone.
	flags    uintptr
	fds      [initFds]uintptr // the descriptors that become 0..initFds-1
	nextfd   uintptr          // above every descriptor in fds
	dfl      [4]uintptr       // a struct sigaction for SIG_DFL
	initMask uint64           // blocked in PID 1: SIGCHLD (read from a signalfd) and SIGTTOU
	noMask   uint64
	sfd      uintptr // the signalfd's descriptor (predicted)
	argv     uintptr // NULL-terminated arrays of C strings
	envv     uintptr
	npaths   uintptr
	paths    [rawMaxPaths]uintptr // where the command may be, in PATH order
	fg       uintptr              // the command takes the terminal's foreground
	cont     uintptr              // continue a stopped command here (protocol.Message.Continue)
	cmdStack uintptr
	markExec uintptr // the timestamp slot of the command's start
	poll     [2]unix.PollFd
	nap      unix.Timespec // rawSupervise's pause when poll itself fails

	// Written by the child.
	stage   uintptr
	execErr uintptr     // the command's exec: the errno reported
	stat    unix.Stat_t // of the candidate refused with EACCES
	pgrp    uint32      // for TIOCSPGRP
	ws      uint32
	killed  uintptr // the signal that killed the command, 0: it exited
	out     [2]uint32
	sigbuf  [128]byte
}

// rawClone is clone(flags) with the child on stack, running rawInitMain (role 0) or
// rawCommandMain (role 1) with arena (rawinit_linux_amd64.s).
//
//go:noescape
func rawClone(flags, stack, arena, role uintptr) (pid uintptr, errno uintptr)

// rawClone3 is rawClone through clone3, with the flags and the stack in args
// (rawinit_linux_amd64.s).
//
//go:noescape
func rawClone3(args *cloneArgs, arena, role uintptr) (pid uintptr, errno uintptr)

// The child's entry points, called only from rawClone's assembly (which staticcheck
// does not read).
var _ = [...]func(*rawArena){rawInitMain, rawCommandMain}

//go:nosplit
//go:norace
func rawSys(nr, a1, a2, a3, a4, a5, a6 uintptr) (uintptr, uintptr) {
	r, _, e := syscall.RawSyscall6(nr, a1, a2, a3, a4, a5, a6)
	return r, uintptr(e)
}

// rawRetry is rawSys under the backend's one retry policy (internal/eintr, whose
// Retry the Go code calls): a call that fails with EINTR is made again.
//
//go:nosplit
//go:norace
func rawRetry(nr, a1, a2, a3, a4, a5, a6 uintptr) (uintptr, uintptr) {
	for {
		r, e := rawSys(nr, a1, a2, a3, a4, a5, a6)
		if e != uintptr(unix.EINTR) {
			return r, e
		}
	}
}

//go:nosplit
//go:norace
func rawMark(a *rawArena, slot uintptr) {
	if slot == 0 || slot > program.MaxMarks {
		return
	}
	rawSys(unix.SYS_CLOCK_GETTIME, unix.CLOCK_MONOTONIC, uintptr(unsafe.Pointer(&a.Ts)), 0, 0, 0, 0)
	a.Times[slot-1] = a.Ts.Sec*1e9 + a.Ts.Nsec
}

//go:nosplit
//go:norace
func rawSend(a *rawArena, kind, value uint32) {
	a.out[0], a.out[1] = kind, value
	rawRetry(unix.SYS_WRITE, controlFd, uintptr(unsafe.Pointer(&a.out[0])), 8, 0, 0, 0)
}

// rawFail reports a failed step to the launcher and ends the init with exitSetup.
//
//go:nosplit
//go:norace
func rawFail(a *rawArena, stage, errno uintptr) {
	a.stage, a.Errno = stage, errno
	if stage != rawStagePrologue {
		rawSend(a, recError, 0)
	}
	for {
		rawSys(unix.SYS_EXIT_GROUP, exitSetup, 0, 0, 0, 0, 0)
	}
}

// rawInitMain is the raw init, from the clone to its exit.
//
//go:nosplit
//go:norace
func rawInitMain(a *rawArena) {
	rawMark(a, 1)
	// No Go handler may ever run here: every signal is still blocked (as the launcher
	// blocked them for the clone); back to the defaults before any is unblocked.
	for sig := uintptr(1); sig <= 64; sig++ {
		rawSys(unix.SYS_RT_SIGACTION, sig, uintptr(unsafe.Pointer(&a.dfl[0])), 0, 8, 0, 0)
	}
	if _, e := rawSys(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&a.initMask)), 0, 8, 0, 0); e != 0 {
		rawFail(a, rawStagePrologue, e)
	}
	if _, e := rawSys(unix.SYS_SETPGID, 0, 0, 0, 0, 0, 0); e != 0 {
		rawFail(a, rawStagePrologue, e)
	}
	if _, e := rawSys(unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0, 0); e != 0 {
		rawFail(a, rawStagePrologue, e)
	}
	// Descriptors as the vfork start places them (vforkChild), then nothing else.
	fds := a.fds
	for i := uintptr(0); i < initFds; i++ {
		if fds[i] < initFds && fds[i] != i {
			if _, e := rawSys(unix.SYS_DUP3, fds[i], a.nextfd+i, unix.O_CLOEXEC, 0, 0, 0); e != 0 {
				rawFail(a, rawStagePrologue, e)
			}
			fds[i] = a.nextfd + i
		}
	}
	for i := uintptr(0); i < initFds; i++ {
		if fds[i] == i {
			continue
		}
		if _, e := rawSys(unix.SYS_DUP3, fds[i], i, 0, 0, 0, 0); e != 0 {
			rawFail(a, rawStagePrologue, e)
		}
	}
	// 0–2 stay inheritable, the control socket does not; the rest goes.
	for i := uintptr(0); i < controlFd; i++ {
		if _, e := rawSys(unix.SYS_FCNTL, i, unix.F_SETFD, 0, 0, 0, 0); e != 0 {
			rawFail(a, rawStagePrologue, e)
		}
	}
	if _, e := rawSys(unix.SYS_FCNTL, controlFd, unix.F_SETFD, unix.FD_CLOEXEC, 0, 0, 0); e != 0 {
		rawFail(a, rawStagePrologue, e)
	}
	if _, e := rawSys(unix.SYS_CLOSE_RANGE, initFds, ^uintptr(0)>>32, 0, 0, 0, 0); e != 0 {
		rawFail(a, rawStagePrologue, e)
	}

	// The compiled plan: id maps, mounts, chdir, privileges.
	a.stage = rawStageOps
	// nops is read atomically (a plain MOV on amd64, no runtime call): a prestarted
	// init waits at an op of its own while the launcher appends the rest and
	// publishes the count (runPrestartedRaw) before it lets the init go.
	for i := uintptr(0); i < atomic.LoadUintptr(&a.Nops) && i < program.MaxOps; i++ {
		op := &a.Ops[i]
		var r, e uintptr
		switch op.Nr {
		case program.OpSameFile:
			if a.SrcStat.Dev != uint64(op.Args[0]) || a.SrcStat.Ino != uint64(op.Args[1]) {
				e = uintptr(unix.ESTALE)
			}
		case program.OpIsGo:
			if a.In[0] != recGo {
				e = uintptr(unix.EBADMSG)
			}
		default:
			r, e = rawRetry(op.Nr, op.Args[0], op.Args[1], op.Args[2], op.Args[3], op.Args[4], op.Args[5])
		}
		if e != 0 && !program.Tolerated(op.OK, e) {
			a.FailOp = i + 1
			rawFail(a, rawStageOps, e)
		}
		if e == 0 && op.Fd != 0 && r != op.Fd-1 {
			// The compiler's count of descriptors is wrong: stop rather than
			// mount through a descriptor that is not the one it meant.
			a.FailOp = i + 1
			rawFail(a, rawStageOps, uintptr(unix.EBADFD))
		}
		rawMark(a, op.Mark)
		if e != 0 {
			i += op.OrSkip
		} else {
			i += op.ThenSkip
		}
	}

	a.stage = rawStageCommand
	sfd, e := rawSys(unix.SYS_SIGNALFD4, ^uintptr(0), uintptr(unsafe.Pointer(&a.initMask)), 8, unix.SFD_CLOEXEC, 0, 0)
	if e == 0 && sfd != a.sfd {
		e = uintptr(unix.EBADFD) // the compiler's count of descriptors is wrong
	}
	if e != 0 {
		rawFail(a, rawStageCommand, e)
	}
	pid, e := rawClone(uintptr(unix.CLONE_VM|unix.CLONE_VFORK)|uintptr(unix.SIGCHLD), a.cmdStack, uintptr(unsafe.Pointer(a)), 1)
	if e != 0 {
		rawFail(a, rawStageCommand, e)
	}
	if a.execErr != 0 {
		// The child reported why no candidate ran, and exited.
		rawRetry(unix.SYS_WAIT4, pid, 0, 0, 0, 0, 0)
		rawFail(a, rawStageExec, a.execErr)
	}
	rawMark(a, a.markExec)
	rawSend(a, recStarted, uint32(pid))

	status := rawSupervise(a, pid)

	// As endSession: nothing of the session may outlive the report. Those that
	// exited already were not left running: reaped before the kill.
	for {
		pid, e := rawRetry(unix.SYS_WAIT4, ^uintptr(0), 0, unix.WNOHANG, 0, 0, 0)
		if e != 0 || pid == 0 {
			break
		}
	}
	rawSys(unix.SYS_KILL, ^uintptr(0), uintptr(unix.SIGKILL), 0, 0, 0, 0)
	left := uint32(0)
	for {
		if _, e := rawRetry(unix.SYS_WAIT4, ^uintptr(0), 0, 0, 0, 0, 0); e != 0 {
			break
		}
		left++
	}
	rawSend(a, recEnded, uint32(a.killed)|min(left, 1<<24-1)<<8)
	for fd := uintptr(0); fd < controlFd; fd++ {
		rawSys(unix.SYS_CLOSE, fd, 0, 0, 0, 0, 0)
	}
	rawSend(a, recExited, uint32(status))
	// Nothing of the session runs any more. The init's own exit waits until the
	// launcher has closed the control socket: then the teardown of the namespaces,
	// and of the memory it shares with the launcher, costs the launcher nothing,
	// and the CLI, which keeps the socket open until it exits (toRecords), returns
	// its status first. A record meanwhile (a signal the launcher forwarded before
	// it read the report) is dropped.
	for {
		n, e := rawRetry(unix.SYS_READ, controlFd, uintptr(unsafe.Pointer(&a.In[0])), 8, 0, 0, 0)
		if n == 0 || e != 0 {
			break
		}
	}
	for {
		rawSys(unix.SYS_EXIT_GROUP, status, 0, 0, 0, 0, 0)
	}
}

// rawSupervise is PID 1's loop (supervise, for the raw init): it returns the
// command's status once the command has exited.
//
// Should poll itself fail (EINVAL: RLIMIT_NOFILE below 2, which the seccomp filter
// keeps the command from setting on PID 1, but not the host; ENOMEM), the loop does
// not spin on it: it pauses (a.nap) and looks at both sources without it — the
// command's end through wait4 WNOHANG, the launcher's records without waiting —
// and so goes on supervising, later by at most a pause.
//
//go:nosplit
//go:norace
func rawSupervise(a *rawArena, cmd uintptr) uintptr {
	for {
		a.poll[0].Revents, a.poll[1].Revents = 0, 0
		_, e := rawSys(unix.SYS_POLL, uintptr(unsafe.Pointer(&a.poll[0])), 2, ^uintptr(0), 0, 0, 0)
		if e == uintptr(unix.EINTR) {
			continue
		}
		polled := e == 0
		if !polled {
			rawSys(unix.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&a.nap)), 0, 0, 0, 0, 0)
		}
		if !polled || a.poll[1].Revents != 0 {
			if polled {
				rawSys(unix.SYS_READ, a.sfd, uintptr(unsafe.Pointer(&a.sigbuf[0])), uintptr(len(a.sigbuf)), 0, 0, 0)
			}
			for {
				pid, e := rawSys(unix.SYS_WAIT4, ^uintptr(0), uintptr(unsafe.Pointer(&a.ws)), unix.WNOHANG|unix.WUNTRACED, 0, 0, 0)
				if e != 0 || pid == 0 {
					break
				}
				if pid != cmd {
					continue // an orphan, reaped
				}
				ws := a.ws
				switch {
				case ws&0x7f == 0: // exited
					return uintptr(ws>>8) & 0xff
				case ws&0xff == 0x7f && a.cont != 0: // stopped, and no shell resumes the launcher
					rawSys(unix.SYS_KILL, -cmd, uintptr(unix.SIGCONT), 0, 0, 0, 0)
				case ws&0xff == 0x7f: // stopped
					rawSend(a, recStopped, 0)
				default: // killed by a signal
					a.killed = uintptr(ws & 0x7f)
					return 128 + a.killed
				}
			}
		}
		if !polled || a.poll[0].Revents != 0 {
			n, e := rawSys(unix.SYS_RECVFROM, controlFd, uintptr(unsafe.Pointer(&a.In[0])), 8, unix.MSG_DONTWAIT, 0, 0)
			if e == uintptr(unix.EINTR) || e == uintptr(unix.EAGAIN) {
				continue
			}
			if e != 0 || n != 8 {
				// The launcher is gone (Pdeathsig follows): end the session.
				return 128 + uintptr(unix.SIGKILL)
			}
			switch a.In[0] {
			case recSignal:
				if a.In[1] > 0 && a.In[1] < 65 {
					rawSys(unix.SYS_KILL, cmd, uintptr(a.In[1]), 0, 0, 0, 0)
				}
			case recContinue:
				if a.In[1] != 0 {
					a.pgrp = uint32(cmd)
					rawSys(unix.SYS_IOCTL, 0, unix.TIOCSPGRP, uintptr(unsafe.Pointer(&a.pgrp)), 0, 0, 0)
				}
				rawSys(unix.SYS_KILL, -cmd, uintptr(unix.SIGCONT), 0, 0, 0, 0)
			}
		}
	}
}

// rawCommandMain is the command's child, between the vfork and its execve.
//
//go:nosplit
//go:norace
func rawCommandMain(a *rawArena) {
	// A session of its own when none of the streams is the controlling terminal, as
	// goinit.StreamsHoldControllingTerminal decides: /dev/tty then does not open.
	ctty := false
	for fd := uintptr(0); fd < 3; fd++ {
		if _, e := rawSys(unix.SYS_IOCTL, fd, unix.TIOCGSID, uintptr(unsafe.Pointer(&a.pgrp)), 0, 0, 0); e == 0 {
			if _, e := rawSys(unix.SYS_IOCTL, fd, unix.TIOCGPTN, uintptr(unsafe.Pointer(&a.pgrp)), 0, 0, 0); e != 0 {
				ctty = true
			}
		}
	}
	if !ctty {
		rawSys(unix.SYS_SETSID, 0, 0, 0, 0, 0, 0)
	} else {
		rawSys(unix.SYS_SETPGID, 0, 0, 0, 0, 0, 0)
	}
	if ctty && a.fg != 0 {
		pid, _ := rawSys(unix.SYS_GETPID, 0, 0, 0, 0, 0, 0)
		a.pgrp = uint32(pid)
		rawSys(unix.SYS_IOCTL, 0, unix.TIOCSPGRP, uintptr(unsafe.Pointer(&a.pgrp)), 0, 0, 0)
	}
	rawSys(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&a.noMask)), 0, 8, 0, 0)
	// As execvp: a candidate that is missing is skipped, one that is there but
	// cannot run is remembered (and skipped); the first other error stops.
	denied := false
	for i := uintptr(0); i < a.npaths && i < rawMaxPaths; i++ {
		_, e := rawSys(unix.SYS_EXECVE, a.paths[i], a.argv, a.envv, 0, 0, 0)
		switch e {
		case uintptr(unix.ENOENT), uintptr(unix.ENOTDIR):
			continue
		case uintptr(unix.EACCES):
			// lookPath's rule: a candidate that cannot even be looked at (a PATH
			// entry closed to us) counts as missing; one that can is the answer
			// unless a later one runs.
			if !denied {
				if _, e := rawSys(unix.SYS_NEWFSTATAT, uintptr(0xffffffffffffff9c), a.paths[i], uintptr(unsafe.Pointer(&a.stat)), 0, 0, 0); e == 0 { // AT_FDCWD
					denied = true
				}
			}
			continue
		}
		a.execErr = e
		rawSys(unix.SYS_EXIT_GROUP, 127, 0, 0, 0, 0, 0)
	}
	if denied {
		a.execErr = uintptr(unix.EACCES)
	} else {
		a.execErr = uintptr(unix.ENOENT)
	}
	for {
		rawSys(unix.SYS_EXIT_GROUP, 127, 0, 0, 0, 0, 0)
	}
}
