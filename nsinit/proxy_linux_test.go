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
	takeListeners(m, mounts.Plan{Proxy: mounts.ProxyAddr}, Options{Listener: func(f *os.File) { got = f }})
	if got == nil {
		t.Fatal("listener not handed over")
	}
	defer got.Close()
	if v, err := unix.GetsockoptInt(int(got.Fd()), unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || v != 1 {
		t.Errorf("handed a socket that does not listen: %d %v", v, err)
	}
	// Without a Proxy in the plan the descriptor is closed, not handed over.
	dup, _ := unix.Dup(int(got.Fd()))
	takeListeners(&protocol.Message{Fds: []int{dup}}, mounts.Plan{}, Options{Listener: func(*os.File) { t.Error("handed over without a Proxy") }})
	if _, err := unix.FcntlInt(uintptr(dup), unix.F_GETFD, 0); err != unix.EBADF {
		t.Errorf("stray descriptor left open: %v", err)
	}
}

// The proxy's listener comes first, the --host-port ones after it in plan order; a
// message with another count of descriptors hands none over and closes them all.
func TestHostPortListenersHandOff(t *testing.T) {
	plan := mounts.Plan{Proxy: mounts.ProxyAddr, HostPorts: []mounts.Forward{{Inside: 1, Host: 2}, {Inside: 3, Host: 4}}}
	fds := func(n int) []int {
		var out []int
		for range n {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fd)
		}
		return out
	}
	three := fds(3)
	var proxy *os.File
	var ports []*os.File
	takeListeners(&protocol.Message{Fds: three}, plan, Options{Listener: func(f *os.File) { proxy = f }, HostPorts: func(fs []*os.File) { ports = fs }})
	if proxy == nil || proxy.Fd() != uintptr(three[0]) || len(ports) != 2 || ports[0].Fd() != uintptr(three[1]) || ports[1].Fd() != uintptr(three[2]) {
		t.Fatalf("handed over proxy %v, ports %v, from %v", proxy, ports, three)
	}
	proxy.Close()
	for _, f := range ports {
		f.Close()
	}
	two := fds(2)
	takeListeners(&protocol.Message{Fds: two}, plan, Options{Listener: func(*os.File) { t.Error("proxy handed over from a short message") }, HostPorts: func([]*os.File) { t.Error("ports handed over from a short message") }})
	for _, fd := range two {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != unix.EBADF {
			t.Errorf("stray descriptor %d left open: %v", fd, err)
		}
	}
}

// The broker gives each answer to the oldest request, makes it non-blocking, and
// refuses every request once the session has ended.
func TestSocketBroker(t *testing.T) {
	ctl, child, err := ControlSocket()
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	defer child.Close()
	b := newSocketBroker()
	conn := frameConn{ctl}
	got := make(chan *os.File, 1)
	go func() {
		f, err := b.get()
		if err != nil {
			t.Error(err)
		}
		got <- f
	}()
	b.ask(conn, <-b.reqs)
	if m, err := protocol.Read(child); err != nil || m.Type != protocol.MsgSocket {
		t.Fatalf("init got %+v %v", m, err)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	b.answer(&protocol.Message{Type: protocol.MsgSocket, Fds: []int{fd}})
	f := <-got
	if f == nil || f.Fd() != uintptr(fd) {
		t.Fatalf("got %v, want fd %d", f, fd)
	}
	if fl, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); fl&unix.O_NONBLOCK == 0 {
		t.Error("the socket is blocking")
	}
	f.Close()
	// An answer nobody waits for is closed.
	stray, _ := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	b.answer(&protocol.Message{Type: protocol.MsgSocket, Fds: []int{stray}})
	if _, err := unix.FcntlInt(uintptr(stray), unix.F_GETFD, 0); err != unix.EBADF {
		t.Errorf("stray socket left open: %v", err)
	}
	waiting := make(chan error, 1)
	go func() { _, err := b.get(); waiting <- err }()
	b.ask(conn, <-b.reqs)
	if m, err := protocol.Read(child); err != nil || m.Type != protocol.MsgSocket {
		t.Fatalf("init got %+v %v", m, err)
	}
	b.end()
	if err := <-waiting; err == nil {
		t.Error("a request waiting at the end got a socket")
	}
	if _, err := b.get(); err == nil {
		t.Error("a request after the end got a socket")
	}
}
