package goinit

import (
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// SetForeground makes pgrp the terminal's foreground group. SIGTTOU is blocked on
// this thread meanwhile: a background caller would otherwise be stopped by it. The
// launcher and the Go init both hand the terminal on with it.
func SetForeground(fd, pgrp int) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var set, old unix.Sigset_t
	Sigaddset(&set, unix.SIGTTOU)
	_ = unix.PthreadSigmask(unix.SIG_BLOCK, &set, &old)
	_ = unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, pgrp)
	_ = unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
}

// Sigaddset adds sig to set (sigaddset(3)).
func Sigaddset(set *unix.Sigset_t, sig syscall.Signal) {
	n := uint(sig) - 1
	set.Val[n/64] |= 1 << (n % 64)
}
