package nsinit

import (
	"net"
	"os"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/nsinit/protocol"
)

func TestWithEnv(t *testing.T) {
	got := withEnv([]string{"PATH=/bin", "HTTP_PROXY=http://corp:8080", "no_proxy=corp"}, []string{"HTTP_PROXY=http://127.0.0.1:3128", "no_proxy=localhost"})
	want := []string{"PATH=/bin", "HTTP_PROXY=http://127.0.0.1:3128", "no_proxy=localhost"}
	if !slices.Equal(got, want) {
		t.Errorf("withEnv: %q, want %q", got, want)
	}
	if env := []string{"A=1"}; !slices.Equal(withEnv(env, nil), env) {
		t.Error("withEnv changed an environment with nothing to add")
	}
}

// The listening socket travels from the init's side of the control socket to the
// launcher's poller-owned end with its frame, and is served there; one nobody asked
// for is closed.
func TestListenerHandOff(t *testing.T) {
	ctl, child, err := ControlSocket()
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	defer child.Close()
	// Any free port: the test runs in the host's namespace.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lf, _ := l.(*net.TCPListener).File()
	l.Close()
	if err := protocol.Write(child, &protocol.Message{Type: protocol.MsgListener}, lf); err != nil {
		t.Fatal(err)
	}
	lf.Close()
	m, err := protocol.ReadPolled(ctl)
	if err != nil || m.Type != protocol.MsgListener || len(m.Fds) != 1 {
		t.Fatalf("read: %+v %v", m, err)
	}
	var got *os.File
	takeListener(m, mounts.Plan{Proxy: mounts.ProxyAddr}, func(f *os.File) { got = f })
	if got == nil {
		t.Fatal("listener not handed over")
	}
	defer got.Close()
	if v, err := unix.GetsockoptInt(int(got.Fd()), unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || v != 1 {
		t.Errorf("handed a socket that does not listen: %d %v", v, err)
	}
	// Without a Proxy in the plan the descriptor is closed, not handed over.
	dup, _ := unix.Dup(int(got.Fd()))
	takeListener(&protocol.Message{Fds: []int{dup}}, mounts.Plan{}, func(*os.File) { t.Error("handed over without a Proxy") })
	if _, err := unix.FcntlInt(uintptr(dup), unix.F_GETFD, 0); err != unix.EBADF {
		t.Errorf("stray descriptor left open: %v", err)
	}
}
