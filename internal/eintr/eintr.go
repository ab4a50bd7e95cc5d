// Package eintr is the native backend's one retry policy for blocking system calls,
// in the launcher, the Go init and the compiled plan's Go runner: a call that fails
// with EINTR is made again, as often as it takes, and any other error is the
// caller's to judge. Handlers are installed with SA_RESTART (the runtime's,
// nsinit.CatchSignals'), but the kernel restarts no call with a timeout (poll,
// nanosleep) and, handler or not, some calls end with EINTR after a stop and
// continue of the job (signal(7)). EAGAIN is no retry: on a descriptor the Go poller
// owns it means "wait until ready", on a non-blocking one "nothing there yet".
//
// The raw init cannot call a Go function value (its code runs under vfork-child
// rules), so it keeps the same policy in rawRetry (nsinit/rawinit_linux_amd64.go).
package eintr

import "syscall"

// Retry calls f until it fails with something other than EINTR.
func Retry[T any](f func() (T, error)) (T, error) {
	for {
		v, err := f()
		if err != syscall.EINTR {
			return v, err
		}
	}
}
