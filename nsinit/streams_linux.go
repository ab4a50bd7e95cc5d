package nsinit

import (
	"os"

	"golang.org/x/sys/unix"
)

// What a session can change of the launcher's standard streams that outlives it and
// that the terminal's modes (terminal_linux.go) do not hold, put back once it has
// ended (docs/terminal.md):
//
//   - each stream's file status flags (O_NONBLOCK, O_APPEND, O_ASYNC): the command's
//     streams are the launcher's open file descriptions, which the operator's shell
//     and whatever runs after agentbox share, so a command that leaves O_NONBLOCK set
//     makes the next program's read of the terminal (or a pipe) fail with EAGAIN;
//   - a terminal's exclusive mode (TIOCEXCL): no open(2) of the terminal succeeds
//     afterwards but root's, /dev/tty included (ssh's and sudo's prompts, editors,
//     a new tmux client). The filter cannot refuse it: serial libraries ask for it
//     on a handed-in USB serial adapter and fail without it;
//   - a terminal's window size (TIOCSWINSZ), only when the session left one that
//     no window has (no rows or columns, or more than a window can hold): a resize
//     of the real window during the session also changes the size, and nothing
//     tells the two apart, so a size a window may have is the window's and stays
//     (putting back the launch's would undo every resize made meanwhile). The filter
//     cannot refuse the request: tmux, script and node-pty set the size of the
//     terminals they make inside.
//
// Unlike the modes, these are put back whether or not the launcher holds the
// terminal's foreground: the kernel asks no foreground for either, and the command
// could change them from the background too.

// streamState is what saveStreams found, one entry per standard stream.
type streamState struct {
	streams []savedStream
}

type savedStream struct {
	f     *os.File
	flags int
	tty   bool // a terminal: excl holds its exclusive mode, ws its window size
	excl  bool
	ws    *unix.Winsize
}

// maxWindowCells bounds the rows and the columns of a real window's terminal, as
// tmux bounds its windows'.
const maxWindowCells = 10000

// noWindowHas says whether a terminal whose size was launch when the session
// began, and is now when it ended, was left with a size no window has.
func noWindowHas(now, launch unix.Winsize) bool {
	if now == launch {
		return false
	}
	empty := (now.Row == 0 || now.Col == 0) && launch.Row != 0 && launch.Col != 0
	return empty || now.Row > maxWindowCells || now.Col > maxWindowCells
}

// saveStreams saves the status flags of each standard stream, and the exclusive
// mode of those that are terminals; nil when there is none.
func saveStreams(stdio Stdio) *streamState {
	var s streamState
	for _, f := range []*os.File{stdio.Stdin, stdio.Stdout, stdio.Stderr} {
		if f == nil {
			continue
		}
		saved := savedStream{f: f}
		withFd(f, func(fd int) {
			flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
			if err != nil {
				return
			}
			saved.flags = flags
			if excl, err := unix.IoctlGetInt(fd, unix.TIOCGEXCL); err == nil {
				saved.tty, saved.excl = true, excl != 0
				saved.ws, _ = unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
			}
			s.streams = append(s.streams, saved)
		})
	}
	if len(s.streams) == 0 {
		return nil
	}
	return &s
}

// restore puts each saved stream's status flags and exclusive mode back where the
// session changed them, and a terminal's window size where it left none a window
// has.
func (s *streamState) restore() {
	if s == nil {
		return
	}
	for _, saved := range s.streams {
		withFd(saved.f, func(fd int) {
			if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err == nil && flags != saved.flags {
				_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFL, saved.flags)
			}
			if !saved.tty {
				return
			}
			if ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ); err == nil && saved.ws != nil && noWindowHas(*ws, *saved.ws) {
				_ = unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, saved.ws)
			}
			excl, err := unix.IoctlGetInt(fd, unix.TIOCGEXCL)
			switch {
			case err != nil || (excl != 0) == saved.excl:
			case saved.excl:
				_ = unix.IoctlSetInt(fd, unix.TIOCEXCL, 0)
			default:
				_ = unix.IoctlSetInt(fd, unix.TIOCNXCL, 0)
			}
		})
	}
}
