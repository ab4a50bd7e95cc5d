// The command's standard streams must not hand the sandbox a
// host file it could open again with more access. A descriptor's /proc/self/fd
// link reopens the file it names in the host's mount namespace, where it is
// writable, with whatever access the file's mode grants, not the access it was
// opened with: a configuration file given on standard input (agentbox exec … <
// ~/.bashrc) becomes writable inside, and a directory becomes a way to create files
// anywhere below it. So a stream that is a file, a directory or a device other than
// a terminal or /dev/null never reaches the sandbox: a file or a device is relayed
// by the launcher through a pipe, a directory is refused. Pipes and terminals pass
// as they are: reopening them reaches nothing new.
//
// A socket is relayed too. Its state belongs to the socket, not to a descriptor:
// shutdown(2), its options (receive timeouts, an attached packet filter) reach every
// holder and outlive the session. A command that shut down a standard stream shared
// with the launcher and its caller (a service's journal stream, a Go API caller's
// socket pair) made the launcher's next line of its own end it by SIGPIPE, its end
// work cut short, and left the caller's stream shut for good.

package prepare

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/backend"
)

// stdioDrainWait bounds how long Stop waits for a relayed output stream to end once the
// command is gone: the init's exit, which closes its copies, finishes in the
// background, and a launcher must never hang on it.
const stdioDrainWait = 5 * time.Second

// StdioRelays are the pipes standing in for the streams that were relayed, and their
// copies.
type StdioRelays struct {
	ours  []*os.File // the launcher's ends the sandbox holds too: closed by Stop
	done  []chan struct{}
	stops []func() // end the socket input copies
	once  sync.Once
}

// GuardStdio returns s with each stream that is a file, a socket or a device relayed
// through a pipe, and the relays, which Stop ends once the command has exited. A directory
// among the streams is refused.
func GuardStdio(s backend.Stdio) (backend.Stdio, *StdioRelays, error) {
	r := &StdioRelays{}
	out := s
	var err error
	if out.Stdin, err = r.input(s.Stdin); err != nil {
		r.Stop()
		return s, nil, err
	}
	if out.Stdout, err = r.output("output", s.Stdout); err != nil {
		r.Stop()
		return s, nil, err
	}
	if sameFile(s.Stdout, s.Stderr) && out.Stdout != s.Stdout {
		// One pipe for both keeps the order of what the command interleaves (2>&1).
		out.Stderr = out.Stdout
	} else if out.Stderr, err = r.output("error output", s.Stderr); err != nil {
		r.Stop()
		return s, nil, err
	}
	return out, r, nil
}

// Stop ends the relays: the output pipes are drained into their files (bounded by
// stdioDrainWait), the input copy is cut off. It is safe to call more than once.
func (r *StdioRelays) Stop() {
	if r == nil {
		return
	}
	r.once.Do(func() {
		for _, stop := range r.stops {
			stop()
		}
		for _, f := range r.ours {
			f.Close()
		}
		deadline := time.After(stdioDrainWait)
		for _, d := range r.done {
			select {
			case <-d:
			case <-deadline:
				return
			}
		}
	})
}

// input relays f when it must: a copy writes f's bytes into a pipe the sandbox
// reads from.
func (r *StdioRelays) input(f *os.File) (*os.File, error) {
	if relay, err := needsStdioRelay("input", f); err != nil || !relay {
		return f, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("standard input: a pipe to relay it: %w", err)
	}
	r.ours = append(r.ours, pr)
	if isSocket(f) {
		stop, err := socketInput(f, pw)
		if err != nil {
			pr.Close()
			pw.Close()
			return nil, fmt.Errorf("standard input: %w", err)
		}
		r.stops = append(r.stops, stop)
		return pr, nil
	}
	go func() {
		_, _ = io.Copy(pw, f) // ends at f's end, or with EPIPE once the command is gone
		pw.Close()
	}()
	return pr, nil
}

// output relays f when it must: the sandbox writes into a pipe, which a copy empties
// into f.
func (r *StdioRelays) output(what string, f *os.File) (*os.File, error) {
	if relay, err := needsStdioRelay(what, f); err != nil || !relay {
		return f, err
	}
	// A descriptor of its own, numbered above 2: a write to a socket whose reader
	// is gone then fails with EPIPE, where one to descriptor 1 or 2 would end the
	// launcher by SIGPIPE (os/signal's rule for the standard streams).
	dst, err := DupFile(f)
	if err != nil {
		return nil, fmt.Errorf("standard %s: %w", what, err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		dst.Close()
		return nil, fmt.Errorf("standard %s: a pipe to relay it: %w", what, err)
	}
	r.ours = append(r.ours, pw)
	done := make(chan struct{})
	r.done = append(r.done, done)
	go func() {
		defer close(done)
		// When the file takes no more (a full disk), closing the pipe fails the
		// command's next write (EPIPE) instead of leaving it blocked on a full pipe.
		_, _ = io.Copy(dst, pr)
		pr.Close()
		dst.Close()
	}()
	return pw, nil
}

// DupFile is a second descriptor of f's open file, close-on-exec and above 2: a
// write through it whose reader is gone fails with EPIPE, where one through
// descriptor 1 or 2 ends a Go program by SIGPIPE.
func DupFile(f *os.File) (*os.File, error) {
	nfd, err := dupFd(f)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(nfd), f.Name()), nil
}

// dupFd is a second descriptor of f's open file, close-on-exec and above 2.
func dupFd(f *os.File) (int, error) {
	nfd, err := -1, error(nil)
	if cerr := withFd(f, func(fd int) { nfd, err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3) }); cerr != nil {
		return -1, cerr
	}
	if err != nil {
		return -1, fmt.Errorf("a descriptor to relay it: %w", err)
	}
	return nfd, nil
}

// needsStdioRelay reports whether the stream f (named by what, for the message) must not
// reach the sandbox as it is.
func needsStdioRelay(what string, f *os.File) (bool, error) {
	if f == nil {
		return false, nil
	}
	st, err := statOf(f)
	if err != nil {
		return false, fmt.Errorf("standard %s: %w", what, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return false, nil
	case unix.S_IFDIR:
		return false, fmt.Errorf("refused: standard %s is a directory, through which the sandbox could create files in it on the host: give the command a file, a pipe or /dev/null", what)
	case unix.S_IFSOCK:
		if isListening(f) { // stdiosock.go
			return false, fmt.Errorf("refused: standard %s is a listening socket: a relay has no bytes to copy from it, and handed on, the sandbox would take the connections of the caller's service and could stop it listening for good: give the command a connected socket, a pipe or /dev/null", what)
		}
	case unix.S_IFCHR:
		if isDevNull(st.Rdev) || isTerminal(f) {
			return false, nil
		}
	}
	return true, nil // a regular file, a socket, a block device, another character device
}

// isDevNull reports whether rdev is /dev/null's device number (1, 3).
func isDevNull(rdev uint64) bool {
	return unix.Major(rdev) == 1 && unix.Minor(rdev) == 3
}

// isTerminal reports whether f is a terminal: the command needs it as it is, for
// job control and its size, and reopening it reaches only the same terminal.
func isTerminal(f *os.File) bool {
	term := false
	_ = withFd(f, func(fd int) {
		_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
		term = err == nil
	})
	return term
}

// sameFile reports whether a and b are the same file (2>&1, or >f 2>f).
func sameFile(a, b *os.File) bool {
	if a == nil || b == nil {
		return false
	}
	sa, errA := statOf(a)
	sb, errB := statOf(b)
	if errA != nil || errB != nil {
		return false
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

// statOf is fstat(2) of f's descriptor.
func statOf(f *os.File) (unix.Stat_t, error) {
	var st unix.Stat_t
	var err error
	if cerr := withFd(f, func(fd int) { err = unix.Fstat(fd, &st) }); cerr != nil {
		return st, cerr
	}
	return st, err
}

// withFd runs fn with f's descriptor. Not f.Fd(): that would put a stream Go's
// poller serves (a Go API caller's non-blocking pipe) in blocking mode for good.
func withFd(f *os.File, fn func(fd int)) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Control(func(fd uintptr) { fn(int(fd)) })
}
