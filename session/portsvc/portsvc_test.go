package portsvc

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/policy"
)

// socketFile is what the init hands over for --publish: a new TCP socket, made
// non-blocking by the launcher.
func socketFile(t testing.TB) *os.File {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	return os.NewFile(uintptr(fd), "socket")
}

func echoServer(t testing.TB) int { return echoServerOn(t, "tcp4", "127.0.0.1:0") }

// echoServerOn is echoServer listening on addr of network.
func echoServerOn(t testing.TB, network, addr string) int {
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// Every connection is made, however fast the handshake completes against the wait
// (a readiness from before the wait is not lost), and a refusal is an error.
func TestConnectLoopback(t *testing.T) {
	port := echoServer(t)
	for i := range 2000 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c, err := connectLoopback(ctx, socketFile(t), port)
		cancel()
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		c.Close()
	}
	closed := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if c, err := connectLoopback(ctx, socketFile(t), closed); err == nil {
		c.Close()
		t.Error("connected to a port nobody listens on")
	}
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// A forwarding relays both ways with half closes, refuses connections past
// MaxConns at once, and closes every connection when stopped.
func TestForwardBounded(t *testing.T) {
	port := echoServer(t)
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Service{sockets: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	f := newForward(KindHostPort, policy.PortMap{Inside: 1, Host: port}, s.dialHost(port))
	f.serve(l)
	addr := l.Addr().String()

	c, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "ping")
	c.(*net.TCPConn).CloseWrite()
	if b, err := io.ReadAll(c); err != nil || string(b) != "ping" {
		t.Fatalf("relayed %q, %v", b, err)
	}
	c.Close()

	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range MaxConns + 20 {
		c, err := net.Dial("tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	deadline := time.Now().Add(10 * time.Second)
	for (f.refused.Load() < 20 || f.relayed.Load() < MaxConns+1) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := f.refused.Load(); n != 20 {
		t.Errorf("refused %d past the bound, want 20", n)
	}
	s.cancel()
	done := make(chan struct{})
	go func() { f.stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("stop did not return")
	}
	for _, c := range held[:MaxConns] {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "timeout") {
			t.Fatalf("a relayed connection is still open after stop: %v", err)
		}
	}
	if r := f.report(); r.Connections != MaxConns+1 || r.Refused != 20 {
		t.Errorf("report %+v", r)
	}
}

// Spares are made ahead up to maxSpares, taken before asking, and closed with the
// service, also the one a refill brings after the close.
func TestSpares(t *testing.T) {
	var s spares
	asked := make(chan *os.File, 16)
	get := func() (*os.File, error) {
		f := socketFile(t)
		asked <- f
		return f, nil
	}
	ctx := context.Background()
	s.refill(ctx, get)
	if len(asked) != maxSpares {
		t.Fatalf("made %d ahead, want %d", len(asked), maxSpares)
	}
	made := []*os.File{<-asked, <-asked}
	f, err := s.take(ctx, get)
	if err != nil || f != made[1] {
		t.Fatalf("took %v (%v), want the spare %v", f, err, made[1])
	}
	f.Close()
	deadline := time.Now().Add(5 * time.Second)
	for len(asked) < 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	s.close()
	close(asked)
	n := 0
	for f := range asked {
		made = append(made, f)
	}
	for _, f := range made {
		n++
		// Fd of a closed *os.File is ^uintptr(0); a refill in flight closes its
		// socket once it sees the close.
		deadline := time.Now().Add(5 * time.Second)
		for f.Fd() != ^uintptr(0) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if f.Fd() != ^uintptr(0) {
			t.Errorf("spare %d left open after close", n)
		}
	}
	if n != maxSpares+1 {
		t.Errorf("made %d sockets, want %d", n, maxSpares+1)
	}
}

// TestDialHostIPv6Loopback: --host-port's dial reaches a host server on [::1] only
// when nothing listens on 127.0.0.1 at the port, prefers 127.0.0.1 when both do,
// and fails when neither does.
func TestDialHostIPv6Loopback(t *testing.T) {
	if l, err := net.Listen("tcp6", "[::1]:0"); err != nil {
		t.Fatalf("no IPv6 loopback here: %v", err)
	} else {
		l.Close()
	}
	s := &Service{sockets: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	defer s.cancel()
	dialled := func(port int) (string, error) {
		c, err := s.dialHost(port)()
		if err != nil {
			return "", err
		}
		defer c.Close()
		io.WriteString(c, "ping")
		c.(*net.TCPConn).CloseWrite()
		if b, err := io.ReadAll(c); err != nil || string(b) != "ping" {
			return "", fmt.Errorf("relayed %q, %v", b, err)
		}
		return c.RemoteAddr().(*net.TCPAddr).IP.String(), nil
	}

	only6 := echoServerOn(t, "tcp6", "[::1]:0")
	if ip, err := dialled(only6); err != nil || ip != "::1" {
		t.Errorf("a server on [::1]:%d only: dialled %q, %v", only6, ip, err)
	}

	both := echoServerOn(t, "tcp6", "[::1]:0")
	if l, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", both)); err == nil {
		l.Close()
		echoServerOn(t, "tcp4", fmt.Sprintf("127.0.0.1:%d", both))
		if ip, err := dialled(both); err != nil || ip != "127.0.0.1" {
			t.Errorf("servers on both loopbacks at %d: dialled %q, %v, want 127.0.0.1", both, ip, err)
		}
	}

	if ip, err := dialled(freePort(t)); err == nil {
		t.Errorf("a port nobody listens on: dialled %s", ip)
	}
}

// replyServer listens on addr of network and answers every connection with reply.
func replyServer(t testing.TB, network, addr, reply string) net.Listener {
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, reply)
			c.Close()
		}
	}()
	return l
}

// envOtherPort names the port on whose 127.0.0.1 the root side of
// TestDialHostPrefersOwnListener listens, for its run as the test user.
const envOtherPort = "AGENTBOX_TEST_OTHER_PORT"

// TestDialHostPrefersOwnListener: another local user (root here) listens on
// 127.0.0.1:PORT and the launching user's own server on [::1]:PORT; --host-port's
// dial reached the other user's first, which got what the session sent to its
// server. Now it reaches the user's own, and the other user's when that is the only
// listener (a system service such as postgres).
func TestDialHostPrefersOwnListener(t *testing.T) {
	if os.Getuid() == 0 {
		l := replyServer(t, "tcp4", "127.0.0.1:0", "other")
		port := l.Addr().(*net.TCPAddr).Port
		if testenv.AsTestUser(t, fmt.Sprintf("%s=%d", envOtherPort, port)) {
			t.Fatal("root: the test user's run did not happen")
		}
		return
	}
	port, err := strconv.Atoi(os.Getenv(envOtherPort))
	if err != nil {
		testenv.Skip(t, "needs root, to own the other listener (%s unset)", envOtherPort)
	}
	mine := replyServer(t, "tcp6", fmt.Sprintf("[::1]:%d", port), "mine")
	s := &Service{sockets: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	defer s.cancel()
	reply := func() string {
		c, err := s.dialHost(port)()
		if err != nil {
			return err.Error()
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		return string(b)
	}
	ls, err := loopbackListeners(port)
	if err != nil {
		t.Fatal(err)
	}
	if got := ownersAt(ls, netip.MustParseAddr("127.0.0.1")); !slices.Equal(got, []uint32{0}) {
		t.Errorf("owners of 127.0.0.1:%d: %v, want [0]", port, got)
	}
	if got := ownersAt(ls, netip.IPv6Loopback()); !slices.Equal(got, []uint32{uint32(os.Getuid())}) {
		t.Errorf("owners of [::1]:%d: %v, want [%d]", port, got, os.Getuid())
	}
	if got := reply(); got != "mine" {
		t.Errorf("root on 127.0.0.1:%d, the user on [::1]: dialled %q, want the user's own", port, got)
	}
	mine.Close()
	if got := reply(); got != "other" {
		t.Errorf("root's server the only listener: dialled %q, want it", got)
	}
}

// TestPreferIPv6NothingOnIPv4: the user's own server listens on [::1]:PORT only and
// nothing on 127.0.0.1:PORT. The dial goes to [::1] first: a 127.0.0.1 dial first
// would be refused now, but another local user who binds 127.0.0.1:PORT between the
// query and the dial would get the connection meant for the user's server.
func TestPreferIPv6NothingOnIPv4(t *testing.T) {
	mine := replyServer(t, "tcp6", "[::1]:0", "mine")
	port := mine.Addr().(*net.TCPAddr).Port
	if !preferIPv6(port, uint32(os.Getuid())) {
		t.Errorf("the user's own on [::1]:%d, nothing on 127.0.0.1: 127.0.0.1 is dialled first, which a listener of another user's bound after the query takes", port)
	}
	// The user's own on both: the usual order.
	v4 := replyServer(t, "tcp4", fmt.Sprintf("127.0.0.1:%d", port), "mine too")
	defer v4.Close()
	if preferIPv6(port, uint32(os.Getuid())) {
		t.Errorf("the user's own on both loopbacks: [::1] dialled first")
	}
}

// BenchmarkPreferIPv6 is what --host-port's choice of loopback costs each
// connection: two inet_diag dumps of the host's TCP listeners.
func BenchmarkPreferIPv6(b *testing.B) {
	port := echoServer(b)
	for b.Loop() {
		preferIPv6(port, uint32(os.Getuid()))
	}
}
