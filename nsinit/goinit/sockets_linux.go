package goinit

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/nsinit/protocol"
)

// ctlWriter is the init's side of the control socket once the command runs: PID 1's
// loop (MsgStopped, MsgEnded, MsgExited) and the launcher's follower (MsgSocket)
// write from two goroutines, one whole frame at a time.
type ctlWriter struct {
	mu sync.Mutex
	f  *os.File
}

func (c *ctlWriter) write(m *protocol.Message, fds ...*os.File) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return protocol.Write(c.f, m, fds...)
}

// sendListeners creates the listening sockets plan asks for in the new network
// namespace — the proxy's (--allow-net), then one per --host-port — and sends them
// to the launcher in one protocol.MsgListener; the init keeps no copy. On failure
// it returns the step that failed.
func sendListeners(ctl *os.File, plan mounts.Plan) (string, error) {
	var fs []*os.File
	defer func() {
		for _, f := range fs {
			f.Close()
		}
	}()
	if plan.Proxy != "" {
		f, err := listen(plan.Proxy)
		if err != nil {
			return "listen for the proxy on " + plan.Proxy, err
		}
		fs = append(fs, f)
	}
	for _, m := range plan.HostPorts {
		addr := fmt.Sprintf("127.0.0.1:%d", m.Inside)
		f, err := listen(addr)
		if err != nil {
			return "listen for --host-port on " + addr, err
		}
		fs = append(fs, f)
	}
	if len(fs) == 0 {
		return "", nil
	}
	if err := protocol.Write(ctl, &protocol.Message{Type: protocol.MsgListener}, fs...); err != nil {
		return "hand over listening sockets", err
	}
	return "", nil
}

// listen creates a TCP socket listening on addr ("127.0.0.1:PORT").
func listen(addr string) (*os.File, error) {
	host, port, err := splitAddr(addr)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), addr)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: host}); err != nil {
		f.Close()
		return nil, fmt.Errorf("bind: %w", err)
	}
	if err := unix.Listen(fd, 128); err != nil {
		f.Close()
		return nil, fmt.Errorf("listen: %w", err)
	}
	return f, nil
}

// sendSocket answers the launcher's protocol.MsgSocket: a new TCP socket of this
// network namespace, unconnected, which the launcher connects (non-blocking) to
// a --publish port inside. The init only creates it, so that a port the sandbox
// makes slow to accept stalls the launcher's relay, never PID 1. Without --publish
// in the plan, or when the socket cannot be made, the answer carries none.
func sendSocket(ctl *ctlWriter, publish bool) {
	if !publish {
		_ = ctl.write(&protocol.Message{Type: protocol.MsgSocket})
		return
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		_ = ctl.write(&protocol.Message{Type: protocol.MsgSocket})
		return
	}
	f := os.NewFile(uintptr(fd), "publish socket")
	defer f.Close()
	_ = ctl.write(&protocol.Message{Type: protocol.MsgSocket}, f)
}
