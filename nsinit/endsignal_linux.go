package nsinit

import (
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/nsinit/goinit"
)

// EndBySignal ends this process by sig, the signal that killed the command of a
// terminal session, once the launcher's own work (cleanup, audit, record) is done:
// a wrapper that exits 128+N instead leaves an interactive shell thinking the job
// exited on its own, and a Ctrl-C only moves a loop on to the next agentbox (bash's
// "wait and cooperative exit"; sudo, env and timeout --foreground end the same way).
//
// The disposition goes back to the default behind the Go runtime's back (its own
// handler would print a traceback for a SIGSEGV or SIGQUIT sent by a user, or act
// on a SIGINT it caught for os/signal), the signal is unblocked on this thread and
// sent to it. For a signal whose default action dumps core (SIGQUIT, SIGSEGV,
// SIGABRT…) the core is refused first: RLIMIT_CORE 0, and the process non-dumpable
// (which a core_pattern pipe, such as systemd-coredump, obeys as well) — the shell
// reports the signal, without "(core dumped)", and no core of agentbox's memory is
// written. It returns only if the signal did not end the process (one whose default
// action is not to end it, or SIGSTOP); the caller then exits with the status.
func EndBySignal(sig syscall.Signal) {
	if sig <= 0 || sig >= 65 || sig == unix.SIGSTOP {
		return
	}
	if dumpsCore(sig) {
		_ = unix.Prlimit(0, unix.RLIMIT_CORE, &unix.Rlimit{}, nil)
		_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	}
	runtime.LockOSThread()
	if sig != unix.SIGKILL {
		// An all-zero struct sigaction is SIG_DFL with no flags and an empty mask
		// on every architecture (32 bytes cover the largest layout).
		var dfl [4]uint64
		if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0); e != 0 {
			runtime.UnlockOSThread()
			return
		}
	}
	var set unix.Sigset_t
	goinit.Sigaddset(&set, sig)
	_ = unix.PthreadSigmask(unix.SIG_UNBLOCK, &set, nil)
	_ = unix.Tgkill(unix.Getpid(), unix.Gettid(), sig)
	runtime.UnlockOSThread()
}

// dumpsCore reports whether sig's default action dumps core (signal(7)).
func dumpsCore(sig syscall.Signal) bool {
	switch sig {
	case unix.SIGQUIT, unix.SIGILL, unix.SIGTRAP, unix.SIGABRT, unix.SIGBUS, unix.SIGFPE,
		unix.SIGSEGV, unix.SIGXCPU, unix.SIGXFSZ, unix.SIGSYS:
		return true
	}
	return false
}
