// Package netsvc holds the services a session's launcher serves to the sandbox over
// sockets, as goroutines of its own: the --allow-net proxy (package netproxy),
// serving the one listening socket the sandbox's init created inside the new network
// namespace (nothing listens on the host), with its end-of-session report, and the
// --ssh-agent filter (package sshagent, sshagent.go).
package netsvc

import (
	"fmt"
	"net"
	"os"

	"github.com/agentbox/agentbox/netproxy"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/shadow"
)

// envTestHosts, for tests only, replaces name resolution in the proxy with a table
// ("NAME=ADDR,…", netproxy.ParseHosts): a behaviour test maps names to its servers on
// loopback and never asks a DNS server. It changes what the launcher resolves, for
// the launching user's own session: nothing the sandbox can set.
const envTestHosts = "_AGENTBOX_TEST_HOSTS"

// Service is one session's proxy.
type Service struct {
	srv    *netproxy.Server
	served chan struct{} // closed when Serve has returned; nil: no listener came
}

// Start prepares the proxy for p; nil when p has no --allow-net.
func Start(p *policy.Policy) (*Service, error) {
	if len(p.AllowNet) == 0 {
		return nil, nil
	}
	rules, err := netproxy.ParseAll(p.AllowNet)
	if err != nil {
		return nil, err
	}
	cfg := netproxy.Config{Rules: rules}
	if h := os.Getenv(envTestHosts); h != "" {
		hosts, err := netproxy.ParseHosts(h)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", envTestHosts, err)
		}
		cfg.Resolver = hosts
	}
	return &Service{srv: netproxy.New(cfg)}, nil
}

// listener serves the init's listening socket (backend.Options.Listener); a second
// one is refused.
func (n *Service) listener(f *os.File) {
	defer f.Close() // FileListener dups it
	if n == nil || n.served != nil {
		return
	}
	l, err := net.FileListener(f)
	if err != nil {
		return // the command then finds nothing listening: its requests fail
	}
	n.served = make(chan struct{})
	go func() {
		defer close(n.served)
		_ = n.srv.Serve(l)
	}()
}

// Listener is the backend.Options.Listener for n (nil without --allow-net).
func (n *Service) Listener() func(*os.File) {
	if n == nil {
		return nil
	}
	return n.listener
}

// Stop ends the proxy with the session: the socket and every connection close, and
// the refusals are returned for the record.
func (n *Service) Stop() []shadow.NetRefusal {
	if n == nil {
		return nil
	}
	n.srv.Close()
	if n.served != nil {
		<-n.served
	}
	var out []shadow.NetRefusal
	for _, r := range n.srv.Refusals() {
		out = append(out, shadow.NetRefusal(r))
	}
	return out
}
