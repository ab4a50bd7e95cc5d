package policy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// PortMap is one --host-port or --publish forwarding: TCP between 127.0.0.1:Inside
// in the sandbox's network namespace and 127.0.0.1:Host on the host, relayed by
// the launcher (session/portsvc). Nothing else of either loopback is reachable
// from the other side.
type PortMap struct {
	Inside int `json:"inside"`
	Host   int `json:"host"`
}

// String is the flag's spelling, PORT:HOSTPORT.
func (m PortMap) String() string { return fmt.Sprintf("%d:%d", m.Inside, m.Host) }

// ProxyPort is the port the --allow-net proxy listens on inside (mounts.ProxyAddr):
// no --host-port or --publish may take it.
const ProxyPort = 3128

// ParsePortMap parses PORT[:HOSTPORT]; HOSTPORT defaults to PORT.
func ParsePortMap(s string) (PortMap, error) {
	in, host, hasHost := strings.Cut(s, ":")
	var m PortMap
	var err error
	if m.Inside, err = parsePort(in); err != nil {
		return m, err
	}
	m.Host = m.Inside
	if hasHost {
		if m.Host, err = parsePort(host); err != nil {
			return m, err
		}
	}
	return m, nil
}

// parsePort parses a TCP port, 1 to 65535, in decimal digits only.
func parsePort(s string) (int, error) {
	if s == "" {
		return 0, fmt.Errorf("want PORT[:HOSTPORT], a port is missing")
	}
	if strings.Trim(s, "0123456789") != "" || len(s) > 5 {
		return 0, fmt.Errorf("want PORT[:HOSTPORT] with ports from 1 to 65535, not %s", quote(s))
	}
	n, _ := strconv.Atoi(s)
	if n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %d is out of range (1 to 65535)", n)
	}
	return n, nil
}

// resolveServices validates the services the launcher runs for the sandbox:
// --host-port, --publish and --ssh-agent.
func resolveServices(p *Policy, opts Options) error {
	if err := resolvePorts(p, opts); err != nil {
		return err
	}
	return resolveSSHAgent(p, opts)
}

// MaxForwards bounds a session's --host-port and --publish together: the init hands
// its listeners over in one frame, which carries a bounded number of descriptors.
const MaxForwards = 32

// resolvePorts validates --host-port and --publish. Both need the sandbox's own
// network namespace (--offline or --allow-net): without one the sandbox shares the
// host's loopback already. An inside port is taken once (by a --host-port
// listener, the proxy, or a --publish the command serves), a host port of
// --publish once; whether the host port is free is checked when it is bound.
func resolvePorts(p *Policy, opts Options) error {
	if len(opts.HostPort) == 0 && len(opts.Publish) == 0 {
		return nil
	}
	hp, err := parsePortList("--host-port", opts.HostPort)
	if err != nil {
		return err
	}
	pub, err := parsePortList("--publish", opts.Publish)
	if err != nil {
		return err
	}
	if len(hp)+len(pub) > MaxForwards {
		return &Error{What: "--host-port/--publish", Reason: fmt.Sprintf("%d forwardings; a session may have at most %d", len(hp)+len(pub), MaxForwards)}
	}
	if !p.Offline && len(p.AllowNet) == 0 {
		what := "--host-port"
		why := "without --offline or --allow-net the sandbox shares the host's network, where the host's loopback ports are reachable already; add --offline (or --allow-net HOST) to give it a network of its own"
		if len(hp) == 0 {
			what = "--publish"
			why = "without --offline or --allow-net the sandbox shares the host's network, where a server it starts on loopback is reachable from the host already; add --offline (or --allow-net HOST) to give it a network of its own"
		}
		return &Error{What: what, Reason: why}
	}
	inside := map[int]string{}
	if len(p.AllowNet) > 0 {
		inside[ProxyPort] = "the --allow-net proxy"
	}
	for _, m := range hp {
		if by, ok := inside[m.Inside]; ok {
			return &Error{What: "--host-port", Path: m.String(), Reason: fmt.Sprintf("port %d inside is taken by %s", m.Inside, by)}
		}
		inside[m.Inside] = "--host-port " + m.String()
	}
	hostPorts := map[int]string{}
	for _, m := range pub {
		if by, ok := inside[m.Inside]; ok {
			return &Error{What: "--publish", Path: m.String(), Reason: fmt.Sprintf("port %d inside is taken by %s", m.Inside, by)}
		}
		if by, ok := hostPorts[m.Host]; ok {
			return &Error{What: "--publish", Path: m.String(), Reason: fmt.Sprintf("host port %d is taken by %s", m.Host, by)}
		}
		hostPorts[m.Host] = "--publish " + m.String()
	}
	p.HostPorts, p.Publish = hp, pub
	return nil
}

// parsePortList parses each value of flag; the same value twice is refused.
func parsePortList(flag string, vals []string) ([]PortMap, error) {
	var out []PortMap
	for _, v := range vals {
		m, err := ParsePortMap(v)
		if err != nil {
			return nil, &Error{What: flag, Path: v, Reason: err.Error()}
		}
		if slices.Contains(out, m) {
			return nil, &Error{What: flag, Path: v, Reason: "is given twice"}
		}
		out = append(out, m)
	}
	return out, nil
}

// narrowPorts: a repository's file may only drop forwardings.
func narrowPorts(flag string, list func(*Policy) []PortMap) fieldRule {
	return func(b, a *Policy) string {
		for _, m := range list(a) {
			if !slices.Contains(list(b), m) {
				return "would add " + m.String() + " to --" + flag + ", which the user's policy does not have"
			}
		}
		return ""
	}
}
