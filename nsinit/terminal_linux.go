package nsinit

import (
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/nsinit/goinit"
)

// The operator's terminal after a session is as it was before it (docs/terminal.md).
// A command that holds the terminal can leave it in any state it likes: a TUI that
// crashed in raw mode, `stty -echo`, output flow stopped with tcflow(TCOOFF) — after
// which the launcher's own first line (an audit finding, "killed N processes") would
// block for ever in write(2). So the launcher saves the terminal modes of each of its
// standard streams that is a terminal before the command can run, and once the
// command has ended and the launcher holds the foreground again, it restarts output
// and puts the modes back, before it writes anything.

// terminalState is what saveTerminal found: one entry per terminal (a terminal that
// is stdin and stderr both is saved and restored once).
type terminalState struct {
	terms []savedTerminal
}

type savedTerminal struct {
	f     *os.File
	modes unix.Termios
}

// withFd runs fn with f's descriptor. Not f.Fd(): that would put a file that Go's
// poller serves (a caller's non-blocking pipe) in blocking mode for good, and every
// later read of it would hold a thread.
func withFd(f *os.File, fn func(fd int)) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	return rc.Control(func(fd uintptr) { fn(int(fd)) }) == nil
}

// saveTerminal saves the modes of every standard stream that is a terminal of which
// this process's group holds the foreground. nil when there is none: not on a
// terminal, or in the background, where tcsetattr stops the command with SIGTTOU —
// unless it ignores SIGTTOU, and then its change stays (docs/terminal.md: putting
// the launch's modes back could undo the foreground job's own).
func saveTerminal(stdio Stdio) *terminalState {
	var s terminalState
	var seen []uint64
	for _, f := range []*os.File{stdio.Stdin, stdio.Stdout, stdio.Stderr} {
		if f == nil {
			continue
		}
		var modes *unix.Termios
		var st unix.Stat_t
		ok := false
		withFd(f, func(fd int) {
			var err error
			modes, err = unix.IoctlGetTermios(fd, unix.TCGETS)
			ok = err == nil && holdsForeground(fd) && unix.Fstat(fd, &st) == nil
		})
		if !ok {
			continue
		}
		dup := false
		for _, r := range seen {
			dup = dup || r == st.Rdev
		}
		if dup {
			continue
		}
		seen = append(seen, st.Rdev)
		s.terms = append(s.terms, savedTerminal{f: f, modes: *modes})
	}
	if len(s.terms) == 0 {
		return nil
	}
	return &s
}

// holdsForeground reports whether this process's group is the foreground of the
// terminal at fd.
func holdsForeground(fd int) bool {
	pgrp, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	return err == nil && pgrp == unix.Getpgrp()
}

// restore restarts output (TCOON) and puts the saved modes back (TCSANOW: draining
// first could wait for ever on output nobody reads) on each saved terminal of which
// the launcher holds the foreground now; one another job has taken meanwhile (the
// launcher was put in the background) is left to it. SIGTTOU is blocked on this
// thread meanwhile, as in setForeground: should the foreground change between the
// check and the ioctl, the launcher is not stopped for it.
func (s *terminalState) restore() {
	if s == nil {
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var set, old unix.Sigset_t
	goinit.Sigaddset(&set, unix.SIGTTOU)
	_ = unix.PthreadSigmask(unix.SIG_BLOCK, &set, &old)
	for i := range s.terms {
		t := &s.terms[i]
		withFd(t.f, func(fd int) {
			if holdsForeground(fd) {
				_ = unix.IoctlSetInt(fd, unix.TCXONC, unix.TCOON)
				_ = unix.IoctlSetTermios(fd, unix.TCSETS, &t.modes)
			}
		})
	}
	_ = unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
}

// foregroundGroup is the foreground process group of the terminal f; 0 when f is
// nil or no terminal.
func foregroundGroup(f *os.File) int {
	pgrp := 0
	if f != nil {
		withFd(f, func(fd int) {
			if g, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP); err == nil {
				pgrp = g
			}
		})
	}
	return pgrp
}

// reclaimEmptyForeground hands the foreground of the launcher's controlling terminal
// ctty, when no process is left in the group that holds it, back to the group that
// held it when the session began (launchFg), or, when that was the launcher's own or
// is gone, to the shell's. A command that ignores SIGTTOU can make its own group the
// foreground from the background (agentbox exec … &, or after Ctrl-Z and bg): the
// kernel asks only that the group be of the terminal's session. Once the session has
// ended that group is empty, and the shell at its prompt, in the background of its
// own terminal, reads EIO and exits when agentbox's end wakes it (docs/terminal.md).
// A group that still has a process is left alone: some job's, or the launcher's own
// (restoreForeground's).
func reclaimEmptyForeground(ctty *os.File, launchFg int) {
	if ctty == nil {
		return
	}
	withFd(ctty, func(fd int) {
		pgrp, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
		if err != nil || pgrp <= 0 || unix.Kill(-pgrp, 0) != unix.ESRCH {
			return
		}
		g := launchFg
		if g <= 0 || g == unix.Getpgrp() || unix.Kill(-g, 0) == unix.ESRCH {
			g = shellGroup()
		}
		if g > 0 {
			goinit.SetForeground(fd, g)
		}
	})
}

// shellGroup is the process group of the shell that started the launcher: its
// parent's group when that is another group of the launcher's session (an
// interactive shell runs each job in a group of its own), else the session leader's
// (whose group is its pid); 0 when that group has no process.
func shellGroup() int {
	own := unix.Getpgrp()
	sid, err := unix.Getsid(0)
	if err != nil || sid <= 0 {
		return 0
	}
	g := sid
	if pg, err := unix.Getpgid(unix.Getppid()); err == nil && pg != own {
		if ps, err := unix.Getsid(unix.Getppid()); err == nil && ps == sid {
			g = pg
		}
	}
	if unix.Kill(-g, 0) == unix.ESRCH {
		return 0
	}
	return g
}
