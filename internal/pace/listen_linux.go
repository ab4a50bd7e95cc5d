package pace

import (
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// Listen makes a Unix stream socket at path listening with a backlog of n, where
// net.Listen asks for the kernel's largest (thousands of queued connections for
// a Gate to drain, with a real client behind them).
func Listen(path string, n int) (net.Listener, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: "unix", Err: os.NewSyscallError("socket", err)}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close() // FileListener holds a duplicate
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		return nil, &net.OpError{Op: "listen", Net: "unix", Err: os.NewSyscallError("bind "+path, err)}
	}
	if err := unix.Listen(fd, n); err != nil {
		return nil, &net.OpError{Op: "listen", Net: "unix", Err: os.NewSyscallError("listen", err)}
	}
	return net.FileListener(f)
}
