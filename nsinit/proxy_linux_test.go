package nsinit

import (
	"net"
	"os"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/mounts"
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

func TestSplitAddr(t *testing.T) {
	ip, port, err := splitAddr(mounts.ProxyAddr)
	if err != nil || ip != [4]byte{127, 0, 0, 1} || port != 3128 {
		t.Errorf("splitAddr(%s) = %v %d %v", mounts.ProxyAddr, ip, port, err)
	}
	for _, bad := range []string{"", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:70000", "1.2.3:80", "1.2.3.256:80", "[::1]:80", "a.b.c.d:1"} {
		if _, _, err := splitAddr(bad); err == nil {
			t.Errorf("splitAddr(%q) accepted", bad)
		}
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
	if err := writeMsg(child, &message{Type: msgListener}, lf); err != nil {
		t.Fatal(err)
	}
	lf.Close()
	m, err := readMsgPolled(ctl)
	if err != nil || m.Type != msgListener || len(m.fds) != 1 {
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
	takeListener(&message{fds: []int{dup}}, mounts.Plan{}, func(*os.File) { t.Error("handed over without a Proxy") })
	if _, err := unix.FcntlInt(uintptr(dup), unix.F_GETFD, 0); err != unix.EBADF {
		t.Errorf("stray descriptor left open: %v", err)
	}
}
