package session

import (
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/agentbox/agentbox/netproxy"
	"github.com/agentbox/agentbox/policy"
)

// envTestHosts, for tests only, replaces name resolution in the proxy with a table
// ("NAME=ADDR,…", netproxy.ParseHosts): a behaviour test maps names to its servers on
// loopback and never asks a DNS server. It changes what the launcher resolves, for
// the launching user's own session: nothing the sandbox can set.
const envTestHosts = "_AGENTBOX_TEST_HOSTS"

// netService is a session's --allow-net proxy (netproxy): goroutines of the
// launcher serving the listening socket the sandbox's init created inside the new
// network namespace. Nothing listens on the host.
type netService struct {
	srv    *netproxy.Server
	served chan struct{} // closed when Serve has returned; nil: no listener came
}

// startNet prepares the proxy for p; nil when p has no --allow-net.
func startNet(p *policy.Policy) (*netService, error) {
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
	return &netService{srv: netproxy.New(cfg)}, nil
}

// listener serves the init's listening socket (nsinit.Options.Listener); a second
// one is refused.
func (n *netService) listener(f *os.File) {
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

// listenerFunc is the Options.Listener for n (nil without --allow-net).
func (n *netService) listenerFunc() func(*os.File) {
	if n == nil {
		return nil
	}
	return n.listener
}

// stop ends the proxy with the session: the socket and every connection close, and
// the refusals are returned for the record.
func (n *netService) stop() []netproxy.Refusal {
	if n == nil {
		return nil
	}
	n.srv.Close()
	if n.served != nil {
		<-n.served
	}
	return n.srv.Refusals()
}

// reportNet says in one line, at the session's end, what the proxy refused and which
// allowed hosts could not be reached: a client shows only "socket closed" or a DNS
// error, which points away from --allow-net.
func reportNet(cfg *Config, rows []netproxy.Refusal) {
	var refused, failed []string
	nr, nf := 0, 0
	for _, r := range rows {
		what := fmt.Sprintf("%s (%s)", r.Host, r.Reason)
		if r.Failed {
			nf += r.Count
			if len(failed) < 3 {
				failed = append(failed, what)
			}
		} else {
			nr += r.Count
			if len(refused) < 3 {
				refused = append(refused, r.Host)
			}
		}
	}
	var parts []string
	if nr > 0 {
		parts = append(parts, fmt.Sprintf("refused %d %s to %s", nr, plural(nr, "request"), strings.Join(refused, ", ")))
	}
	if nf > 0 {
		parts = append(parts, fmt.Sprintf("%d allowed %s failed upstream: %s", nf, plural(nf, "request"), strings.Join(failed, ", ")))
	}
	if len(parts) > 0 {
		fmt.Fprintf(cfg.Stderr, "agentbox: --allow-net: %s; agentbox show lists them\n", strings.Join(parts, "; "))
	}
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
