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

// StreamsHoldControllingTerminal reports whether one of the descriptors 0, 1 and 2
// is this process's controlling terminal (TIOCGSID answers only for it, or for a
// pseudo-terminal master, which TIOCGPTN tells apart). A command without it among
// its streams starts a session of its own (setsid): the operator's terminal is then
// no controlling terminal of it, so /dev/tty does not open and it can neither write
// to the terminal nor change its modes behind the launcher's back
// (docs/terminal.md).
func StreamsHoldControllingTerminal() bool {
	return IsControllingTerminal(0) || IsControllingTerminal(1) || IsControllingTerminal(2)
}

// IsControllingTerminal reports whether fd is this process's controlling terminal:
// TIOCGSID answers only for it, or for a pseudo-terminal master, which TIOCGPTN
// tells apart.
func IsControllingTerminal(fd int) bool {
	if _, err := unix.IoctlGetInt(fd, unix.TIOCGSID); err != nil {
		return false
	}
	_, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	return err != nil
}
