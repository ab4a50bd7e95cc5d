//go:build !mips && !mipsle && !mips64 && !mips64le

package goinit

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// PID 1 of a PID namespace is protected by the kernel from its own namespace only
// where it has no handler: a signal sent from inside to an init whose disposition is
// SIG_DFL is dropped (SIGKILL and SIGSTOP included), one sent to a handler is
// delivered. The Go runtime installs a handler for nearly every signal, and its
// handler crashes the process on SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS,
// SIGQUIT and SIGABRT (a traceback on the operator's terminal) and exits it on
// SIGTERM, SIGHUP and SIGINT. signal.Notify does not close that: a SIGSEGV sent with
// sigqueue (si_code SI_QUEUE) is not "from a user" to the runtime, which takes it
// for a fault and panics whatever is registered.
//
// The init needs no signal at all (the launcher's come as control messages), so from
// before the command exists it has none: every disposition is set back to SIG_DFL,
// behind the runtime's back. What the runtime used them for is not needed from then
// on: SIGURG (asynchronous preemption: the init's goroutines block in system calls),
// SIGPROF (profiling), signal 33 (syscall.AllThreadsSyscall, syscall.Setuid and its
// kin: the init must not call them once dropSignalHandlers ran), and the crash report
// of a fault in the init's own code (a real fault still kills it: the kernel forces
// SIG_DFL for it). The command starts with every disposition at SIG_DFL, as it did
// before: the Go runtime's fork resets the handlers it installed, and the init never
// inherits an ignored signal the command would have kept (the launcher catches
// SIGHUP and SIGINT to forward them; for the others the init's runtime installs its
// handlers over an inherited SIG_IGN).

// sigactionBuf is large enough for the kernel's struct sigaction on every
// architecture this file builds for; all zero, it is SIG_DFL with no flags and an
// empty mask.
type sigactionBuf [4]uint64

// dropSignalHandlers gives every catchable signal of this process the default
// disposition, one rt_sigaction each (62 system calls).
func dropSignalHandlers() error {
	var dfl sigactionBuf
	for sig := uintptr(1); sig <= 64; sig++ {
		if sig == uintptr(unix.SIGKILL) || sig == uintptr(unix.SIGSTOP) {
			continue
		}
		if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, sig, uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0); e != 0 {
			return e
		}
	}
	return nil
}
