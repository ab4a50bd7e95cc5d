// Package portsvc is a session's --host-port and --publish forwardings: TCP relays
// run as goroutines of the launcher between the sandbox's loopback and the host's.
// The sandbox's end of each is a socket of its network namespace that the init
// created (a listening one for --host-port, a fresh one per connection for
// --publish) and handed out; the host's end is a loopback socket of the launcher's.
// Nothing of either side is reachable but the forwarded ports.
package portsvc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"

	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/shadow"
)

// Service is one session's forwardings.
type Service struct {
	hostPorts []*forward // in the plan's order, waiting for the init's listeners
	publish   []*forward // listening on the host already
	ctx       context.Context
	cancel    context.CancelFunc
	// sockets is closed once getSocket is set: the command runs, and the init
	// answers requests for sockets.
	sockets   chan struct{}
	getSocket func() (*os.File, error)
	mu        sync.Mutex // guards stopped: the init's listeners arrive on its goroutine
	stopped   bool
	spares    spares // sockets from the init made ahead (spares.go)
}

// Start binds the host's ends of p's --publish ports (loopback only: listenLoopback)
// and prepares the --host-port relays; nil when p has neither. A host port in use
// stops the launch before the command starts.
func Start(p *policy.Policy) (*Service, error) {
	if len(p.HostPorts) == 0 && len(p.Publish) == 0 {
		return nil, nil
	}
	s := &Service{sockets: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	for _, m := range p.HostPorts {
		s.hostPorts = append(s.hostPorts, newForward(KindHostPort, m, s.dialHost(m.Host)))
	}
	for _, m := range p.Publish {
		ls, err := listenLoopback(m)
		if err != nil {
			s.Stop()
			return nil, err
		}
		f := newForward(KindPublish, m, s.dialInside(m.Inside))
		s.publish = append(s.publish, f)
		for _, l := range ls {
			f.serve(l)
		}
	}
	return s, nil
}

// listenLoopback binds the host's ends of m: 127.0.0.1:HOSTPORT and, where the host
// has an IPv6 loopback, [::1]:HOSTPORT too. A client of localhost:HOSTPORT may try
// ::1 first (browsers do): left free, that port is any local user's to take (or a
// session's that shares the host's network), and the operator's client would reach
// that server instead of the sandbox's.
func listenLoopback(m policy.PortMap) ([]net.Listener, error) {
	l4, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", m.Host))
	if err != nil {
		return nil, publishError(m, "127.0.0.1", err)
	}
	l6, err := net.Listen("tcp6", fmt.Sprintf("[::1]:%d", m.Host))
	switch {
	case err == nil:
		return []net.Listener{l4, l6}, nil
	case errors.Is(err, syscall.EADDRNOTAVAIL), errors.Is(err, syscall.EAFNOSUPPORT):
		return []net.Listener{l4}, nil // no IPv6 loopback here: nobody can listen on it
	}
	l4.Close()
	return nil, publishError(m, "[::1]", err)
}

// publishError says why the host's end of m at addr cannot be bound, in one line.
func publishError(m policy.PortMap, addr string, err error) error {
	switch {
	case errors.Is(err, syscall.EADDRINUSE) && addr != "127.0.0.1":
		return fmt.Errorf("--publish %s: the host's %s:%d is in use, and a client of localhost:%d could reach it instead of the sandbox; stop what listens there or publish to another host port (--publish %d:HOSTPORT)", m, addr, m.Host, m.Host, m.Inside)
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("--publish %s: the host's %s:%d is in use; stop what listens there or publish to another host port (--publish %d:HOSTPORT)", m, addr, m.Host, m.Inside)
	case errors.Is(err, syscall.EACCES):
		return fmt.Errorf("--publish %s: the host's %s:%d needs privileges to bind (ports below 1024); publish to a port above 1023 (--publish %d:HOSTPORT)", m, addr, m.Host, m.Inside)
	}
	return fmt.Errorf("--publish %s: cannot listen on the host's %s:%d: %v", m, addr, m.Host, err)
}

// HostPorts is the backend.Options.HostPorts for s (nil without --host-port): it
// serves the init's listening sockets, one per --host-port in order.
func (s *Service) HostPorts() func([]*os.File) {
	if s == nil || len(s.hostPorts) == 0 {
		return nil
	}
	return s.takeListeners
}

func (s *Service) takeListeners(files []*os.File) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range files {
		if i < len(s.hostPorts) && !s.stopped {
			l, err := net.FileListener(f) // a dup: f is closed below
			if err == nil {
				s.hostPorts[i].serve(l)
			} else {
				s.hostPorts[i].failed.Add(1) // the record says it was not served
			}
		}
		f.Close()
	}
	for i := len(files); i < len(s.hostPorts); i++ {
		s.hostPorts[i].failed.Add(1) // the init handed no listener for it
	}
}

// Sockets is the backend.Options.Sockets for s (nil without --publish).
func (s *Service) Sockets() func(func() (*os.File, error)) {
	if s == nil || len(s.publish) == 0 {
		return nil
	}
	return func(get func() (*os.File, error)) {
		if s.getSocket == nil {
			s.getSocket = get
			close(s.sockets)
			go s.spares.refill(s.ctx, get)
		}
	}
}

// Stop ends every forwarding with the session: the listeners and every connection
// close, and what each relayed is returned for the record. A second call returns
// nothing.
func (s *Service) Stop() []shadow.PortForward {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil
	}
	s.stopped = true
	s.cancel()
	s.spares.close()
	var out []shadow.PortForward
	for _, f := range append(append([]*forward(nil), s.hostPorts...), s.publish...) {
		f.stop()
		out = append(out, f.report())
	}
	return out
}

// dialHost connects to the host's 127.0.0.1:port (--host-port), and, when nothing
// listens there (ECONNREFUSED), to [::1]:port: a server of localhost may listen on
// IPv6's loopback only (Node's since 18, which resolves localhost to ::1 first).
// Both are the host's loopback, which any local user can bind alike; no other
// address is dialled. A host without ::1 gets the first refusal. When the user's
// own server listens on ::1 and another user's on 127.0.0.1, ::1 is tried first
// (preferIPv6): the other user's would get what the session sends to its server.
// A server of another user's that is the only one (postgres on 5432) is dialled.
func (s *Service) dialHost(port int) func() (net.Conn, error) {
	v4 := fmt.Sprintf("127.0.0.1:%d", port)
	v6 := fmt.Sprintf("[::1]:%d", port)
	uid := uint32(os.Getuid())
	return func() (net.Conn, error) {
		ctx, cancel := context.WithTimeout(s.ctx, dialTimeout)
		defer cancel()
		var d net.Dialer
		first, firstAddr, second, secondAddr := "tcp4", v4, "tcp6", v6
		if preferIPv6(port, uid) {
			first, firstAddr, second, secondAddr = second, secondAddr, first, firstAddr
		}
		c, err := d.DialContext(ctx, first, firstAddr)
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
			return c, err
		}
		if c2, err2 := d.DialContext(ctx, second, secondAddr); err2 == nil {
			return c2, nil
		} else if errors.Is(err2, syscall.ECONNREFUSED) {
			return nil, err2
		}
		return nil, err
	}
}

// dialInside connects to 127.0.0.1:port in the sandbox's network namespace
// (--publish), through a socket the init made there (connect.go).
func (s *Service) dialInside(port int) func() (net.Conn, error) {
	return func() (net.Conn, error) {
		ctx, cancel := context.WithTimeout(s.ctx, dialTimeout)
		defer cancel()
		select {
		case <-s.sockets: // the command has started
		case <-ctx.Done():
			return nil, errors.New("the command has not started")
		}
		f, err := s.spares.take(s.ctx, s.getSocket)
		if err != nil {
			return nil, err
		}
		return connectLoopback(ctx, f, port)
	}
}
