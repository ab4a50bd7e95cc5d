package portsvc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// connectLoopback connects f, a non-blocking TCP socket of the sandbox's network
// namespace, to 127.0.0.1:port there and returns it as a connection; f is closed
// either way. The sandbox can make its listener slow to accept (a full backlog
// drops the handshake): the wait is the runtime poller's, bounded by ctx.
func connectLoopback(ctx context.Context, f *os.File, port int) (net.Conn, error) {
	defer f.Close() // FileConn dups it
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	addr := &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}
	var cerr error
	if err := rc.Control(func(fd uintptr) { cerr = unix.Connect(int(fd), addr) }); err != nil {
		return nil, err
	}
	if errors.Is(cerr, unix.EINPROGRESS) {
		cerr = waitConnected(ctx, f, rc)
	}
	if cerr != nil {
		return nil, fmt.Errorf("connect to 127.0.0.1:%d inside: %w", port, cerr)
	}
	return net.FileConn(f)
}

// waitConnected waits until the connection f started is made or has failed.
func waitConnected(ctx context.Context, f *os.File, rc interface {
	Write(func(uintptr) bool) error
}) error {
	deadline, _ := ctx.Deadline()
	if err := f.SetWriteDeadline(deadline); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetWriteDeadline(time.Now()) })
	defer stop()
	// The poller forgets readiness from before the wait began, so each round
	// looks at the socket itself: a connection made (or failed) before the wait
	// is seen then, one made after it wakes the wait.
	var soErr error
	err := rc.Write(func(fd uintptr) bool {
		n, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
		switch {
		case err != nil:
			soErr = err
			return true
		case n != 0:
			soErr = unix.Errno(n)
			return true
		}
		_, err = unix.Getpeername(int(fd))
		if errors.Is(err, unix.ENOTCONN) {
			return false // still connecting
		}
		soErr = err
		return true
	})
	if err != nil {
		return err
	}
	return soErr
}
