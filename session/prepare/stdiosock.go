package prepare

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// isSocket reports whether f is a socket.
func isSocket(f *os.File) bool {
	st, err := statOf(f)
	return err == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK
}

// isListening reports whether the socket f listens for connections (SO_ACCEPTCONN):
// it carries no stream of bytes, and shutdown(2) by any holder ends its listening.
func isListening(f *os.File) bool {
	on := 0
	if withFd(f, func(fd int) { on, _ = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN) }) != nil {
		return false
	}
	return on != 0
}

// socketInput copies what arrives on the socket sock into pw, the pipe the command
// reads, until the socket ends, the command's end of the pipe is gone, or the
// returned stop is called. It reads only when poll(2) says bytes are there, and
// with MSG_DONTWAIT (the socket's blocking mode is a file status flag shared with
// the caller, left as it is), so once stopped it takes nothing more of what the
// caller's stream brings after the session.
func socketInput(sock, pw *os.File) (stop func(), err error) {
	// A raw descriptor: an *os.File's Fd would clear O_NONBLOCK on the caller's
	// open file.
	src, err := dupFd(sock)
	if err != nil {
		return nil, err
	}
	var wake [2]int
	if err := unix.Pipe2(wake[:], unix.O_CLOEXEC); err != nil {
		unix.Close(src)
		return nil, fmt.Errorf("a pipe to stop its relay: %w", err)
	}
	go func() {
		defer pw.Close()
		defer unix.Close(src)
		defer unix.Close(wake[0])
		buf := make([]byte, 32<<10)
		for {
			n, err := recvWhenReady(src, wake[0], buf)
			if err != nil || n == 0 {
				return // the socket's end, an error, or stopped
			}
			if _, err := pw.Write(buf[:n]); err != nil {
				return // the command's end is gone, or stopped
			}
		}
	}()
	return func() {
		unix.Close(wake[1]) // poll sees the hang-up
		pw.Close()          // a write blocked on a full pipe returns
	}, nil
}

// errStopped is recvWhenReady's answer once the relay was stopped.
var errStopped = errors.New("stopped")

// recvWhenReady waits until fd has bytes (or its end) or wake hangs up, then takes
// at most len(buf) bytes without blocking; 0 is the socket's end.
func recvWhenReady(fd, wake int, buf []byte) (int, error) {
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(wake), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil {
			if err == unix.EINTR {
				continue
			}
			return 0, err
		}
		if fds[1].Revents != 0 {
			return 0, errStopped
		}
		if fds[0].Revents == 0 {
			continue
		}
		n, _, errno := unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), unix.MSG_DONTWAIT, 0, 0)
		switch errno {
		case 0:
			return int(n), nil
		case unix.EAGAIN, unix.EINTR:
			continue // another reader of the caller's took it first
		}
		return 0, errno
	}
}
