package nsinit

import "golang.org/x/sys/unix"

// The retry policy of every blocking system call of the native backend, in both
// inits and the launcher's starts: a call that fails with EINTR is made again, as
// often as it takes, and any other error is the caller's to judge. Handlers are
// installed with SA_RESTART (the runtime's, CatchSignals'), but the kernel restarts
// no call with a timeout (poll, nanosleep) and, handler or not, some calls end with
// EINTR after a stop and continue of the job (signal(7)). EAGAIN is no retry:
// on a descriptor the Go poller owns it means "wait until ready" (rc.Read, rc.Write
// return false), on a non-blocking one in the raw init "nothing there yet".
//
// Go code calls retryEINTR. The raw init cannot call a Go function value (its code
// runs under vfork-child rules), so it keeps the same policy in rawRetry
// (rawinit_linux_amd64.go), on top of its raw system calls.

// retryEINTR calls f until it fails with something other than EINTR.
func retryEINTR[T any](f func() (T, error)) (T, error) {
	for {
		v, err := f()
		if err != unix.EINTR {
			return v, err
		}
	}
}
