// Package netproxy is agentbox's network allowlist: the rules of --allow-net
// (parsing, matching, the agents' presets) and the proxy the launcher runs for a
// session whose network namespace has no other way out.
//
// The rules are pure and build anywhere. The proxy (proxy.go) serves HTTP CONNECT,
// plain HTTP forwarding and SOCKS5 CONNECT on any net.Listener, with the resolver
// and the dialer injectable, so that tests run it on loopback with names they map
// themselves. It never looks inside a tunnel: HTTPS is decided by the CONNECT name.
//
// Do not use it as a general-purpose proxy: it trusts nobody on its listener and
// refuses everything not listed, but it is built for one sandbox's traffic.
package netproxy

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode"
)

// Rule is one allowed destination: a host name, a wildcard suffix, or an address
// prefix, with one port or every port.
type Rule struct {
	// Name is a lower-case host name without a trailing dot; with Wildcard, the
	// suffix its subdomains end in ("example.com" for "*.example.com"). Empty for
	// an address rule.
	Name     string
	Wildcard bool
	// Prefix is an address rule's network (a single address is a /32 or /128);
	// invalid for a name rule. IPv4-mapped IPv6 is stored as IPv4.
	Prefix netip.Prefix
	// Port is the one port allowed; 0: every port.
	Port uint16
}

// String is the rule as --allow-net spells it.
func (r Rule) String() string {
	var host string
	switch {
	case r.Name != "" && r.Wildcard:
		host = "*." + r.Name
	case r.Name != "":
		host = r.Name
	case r.Prefix.IsSingleIP():
		host = r.Prefix.Addr().String()
	default:
		host = r.Prefix.String()
	}
	if r.Port == 0 {
		return host
	}
	if r.Name == "" && r.Prefix.Addr().Is6() {
		host = "[" + host + "]"
	}
	return host + ":" + strconv.Itoa(int(r.Port))
}

// Presets are the hosts each agent or tool needs, named with a leading "@"
// (--allow-net @claude). README.md lists them with their sources; keep both in step.
// A function, not a map variable, so that only a launch that names a preset builds
// the map.
func Presets() map[string][]string {
	return map[string][]string{
		// Claude Code: the API, the login (console and claude.ai OAuth), and its
		// telemetry and error reports (statsig, Sentry), which it waits for.
		"claude": {"api.anthropic.com", "console.anthropic.com", "platform.claude.com", "claude.ai", "statsig.anthropic.com", "sentry.io"},
		// Codex CLI: the API, ChatGPT sign-in and the ChatGPT backend it talks to then.
		"codex": {"api.openai.com", "auth.openai.com", "chatgpt.com"},
		// Gemini CLI: the API key endpoint, Google sign-in, Code Assist.
		"gemini": {"generativelanguage.googleapis.com", "cloudcode-pa.googleapis.com", "oauth2.googleapis.com", "accounts.google.com"},
		// npm and yarn's registries.
		"npm": {"registry.npmjs.org", "registry.yarnpkg.com"},
		// Git over HTTPS and SSH, the API, release and raw downloads.
		"github": {"github.com", "api.github.com", "codeload.github.com", "uploads.github.com", "*.githubusercontent.com"},
		// pip: the index and its file host.
		"pypi": {"pypi.org", "files.pythonhosted.org"},
		// Go modules: the module proxy and the checksum database.
		"go": {"proxy.golang.org", "sum.golang.org"},
		// Cargo: the sparse index and the crate downloads.
		"crates": {"crates.io", "index.crates.io", "static.crates.io"},
	}
}

// PresetNames are the presets' names, sorted, for messages.
func PresetNames() []string {
	presets := Presets()
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, "@"+n)
	}
	sort.Strings(names)
	return names
}

// ParseError is a --allow-net value that cannot be used: what was given and why.
type ParseError struct {
	Spec, Reason string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("--allow-net %s: %s", quoteSpec(e.Spec), e.Reason)
}

// quoteSpec keeps a hostile value on one line.
func quoteSpec(s string) string {
	if strconv.CanBackquote(s) && !strings.ContainsAny(s, " \t`") {
		return s
	}
	return strconv.Quote(s)
}

// maxSpec bounds one value: no host name is longer than 253 bytes.
const maxSpec = 300

// Parse turns one --allow-net value into rules: HOST, *.DOMAIN, an IP address or a
// CIDR prefix, each optionally with :PORT (an IPv6 address or prefix in brackets
// then), or @PRESET.
func Parse(spec string) ([]Rule, error) {
	bad := func(reason string) ([]Rule, error) { return nil, &ParseError{Spec: spec, Reason: reason} }
	if len(spec) > maxSpec {
		return bad(fmt.Sprintf("longer than %d bytes", maxSpec))
	}
	if why := misuse(spec); why != "" {
		return bad(why)
	}
	if name, ok := strings.CutPrefix(spec, "@"); ok {
		hosts, ok := Presets()[name]
		if !ok {
			return bad("no such preset (have " + strings.Join(PresetNames(), ", ") + ")")
		}
		var rules []Rule
		for _, h := range hosts {
			r, err := parseOne(h)
			if err != nil {
				panic("netproxy: bad preset " + name + ": " + err.Error()) // a test walks every preset
			}
			rules = append(rules, r)
		}
		return rules, nil
	}
	r, err := parseOne(spec)
	if err != nil {
		return bad(err.Error())
	}
	return []Rule{r}, nil
}

// ParseAll parses every value and returns the rules in order.
func ParseAll(specs []string) ([]Rule, error) {
	var rules []Rule
	for _, s := range specs {
		r, err := Parse(s)
		if err != nil {
			return nil, err
		}
		rules = append(rules, r...)
	}
	return rules, nil
}

func parseOne(spec string) (Rule, error) {
	if spec == "" {
		return Rule{}, fmt.Errorf("is empty (want HOST[:PORT], *.DOMAIN, an address or a CIDR prefix, or a preset: %s)", strings.Join(PresetNames(), ", "))
	}
	host, port, err := splitHostPort(spec)
	if err != nil {
		return Rule{}, err
	}
	r := Rule{Port: port}
	if pfx, err := parsePrefix(host); err == nil {
		r.Prefix = pfx
		return r, nil
	} else if strings.ContainsAny(host, ":/") {
		return Rule{}, fmt.Errorf("not an address or prefix: %v", err)
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		r.Wildcard, host = true, rest
	}
	name, err := CanonicalName(host)
	if err != nil {
		return Rule{}, err
	}
	if _, err := netip.ParseAddr(name); err == nil {
		if r.Wildcard {
			return Rule{}, fmt.Errorf("a wildcard goes with a domain name, not an address")
		}
		// An address written as a name ("0.0.0.0.", a trailing dot): an address
		// rule, with its checks, never a name that the resolver would be asked for.
		if pfx, err := parsePrefix(name); err == nil {
			r.Prefix = pfx
			return r, nil
		}
	}
	if r.Wildcard && !strings.Contains(name, ".") {
		return Rule{}, fmt.Errorf("*.%s would match a whole top-level domain; name a domain below it", name)
	}
	r.Name = name
	return r, nil
}

// splitHostPort splits "host", "host:port", "[v6]", "[v6]:port", "v6" (several
// colons, no brackets: no port) and "prefix/len[:port]".
func splitHostPort(s string) (string, uint16, error) {
	if rest, ok := strings.CutPrefix(s, "["); ok {
		host, after, ok := strings.Cut(rest, "]")
		if !ok {
			return "", 0, fmt.Errorf("missing ']'")
		}
		if after == "" {
			return host, 0, nil
		}
		p, ok := strings.CutPrefix(after, ":")
		if !ok {
			return "", 0, fmt.Errorf("unexpected %q after ']'", after)
		}
		port, err := parsePort(p)
		return host, port, err
	}
	if strings.Count(s, ":") > 1 {
		return s, 0, nil // a bare IPv6 address or prefix: no port
	}
	host, p, ok := strings.Cut(s, ":")
	if !ok {
		return s, 0, nil
	}
	port, err := parsePort(p)
	return host, port, err
}

func parsePort(p string) (uint16, error) {
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 || p[0] == '+' {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", p)
	}
	return uint16(n), nil
}

// parsePrefix parses an address (a single-address prefix) or a CIDR prefix, masked;
// IPv4-mapped IPv6 becomes IPv4, and a zone is refused.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		a := p.Addr()
		bits := p.Bits()
		if a.Is4In6() {
			if bits < 96 {
				return netip.Prefix{}, fmt.Errorf("an IPv4-mapped prefix shorter than /96")
			}
			a, bits = a.Unmap(), bits-96
		}
		return netip.PrefixFrom(a, bits).Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("an address with a zone")
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// CanonicalName lower-cases a host name and drops one trailing dot, and refuses
// what is not a DNS name: labels of letters, digits, '-' and '_', 1 to 63 bytes,
// 253 in all. An IP address passes unchanged (canonical form).
func CanonicalName(h string) (string, error) {
	if a, err := netip.ParseAddr(h); err == nil {
		return a.Unmap().String(), nil
	}
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if h == "" || len(h) > 253 {
		return "", fmt.Errorf("not a host name (empty or longer than 253 bytes)")
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return "", fmt.Errorf("not a host name (empty label or one longer than 63 bytes)")
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", fmt.Errorf("not a host name (%q is not a letter, digit, '-' or '_'; write a '*' only as the first label)", rune(c))
			}
		}
	}
	return h, nil
}

// Rules is a parsed allowlist.
type Rules []Rule

// MatchName reports whether the canonical name and port are allowed by a name
// rule; nameListed reports whether some rule lists the name at any port (for the
// message). Address rules never match a name.
func (rs Rules) MatchName(name string, port uint16) (ok, nameListed bool) {
	for _, r := range rs {
		if r.Name == "" {
			continue
		}
		if r.Name == name && !r.Wildcard || r.Wildcard && strings.HasSuffix(name, "."+r.Name) {
			nameListed = true
			if r.Port == 0 || r.Port == port {
				return true, true
			}
		}
	}
	return false, nameListed
}

// MatchAddr reports whether an address rule allows a at port. A special address
// (Special) is allowed only by a rule whose whole prefix lies within its special
// range: "127.0.0.1" or "169.254.0.0/16" list one, "0.0.0.0/0" does not.
func (rs Rules) MatchAddr(a netip.Addr, port uint16) bool {
	return rs.matchAddr(a, port, nil)
}

// matchAddr is MatchAddr for an address that may be one of this host's own
// (isLocal, nil: none is): such an address is special in a range of its own, so
// only a rule listing exactly it allows it, not a prefix that happens to hold it.
// isLocal is asked only when a rule holds a: asking costs the launcher two
// netlink dumps, and a request no rule can allow must cost it nothing of the kind.
func (rs Rules) matchAddr(a netip.Addr, port uint16, isLocal func(netip.Addr) bool) bool {
	a = a.Unmap()
	special, class := Special(a)
	asked := false
	for _, r := range rs {
		if r.Name != "" || !r.Prefix.Contains(a) || (r.Port != 0 && r.Port != port) {
			continue
		}
		if !special && !asked && isLocal != nil {
			asked = true
			if isLocal(a) {
				special, class = true, netip.PrefixFrom(a, a.BitLen())
			}
		}
		if !special || class.Bits() <= r.Prefix.Bits() && class.Contains(r.Prefix.Addr()) {
			return true
		}
	}
	return false
}

// special are the ranges no name rule reaches and no wide prefix covers: they are
// this host, or its link, rather than somewhere on the internet. Parsed at the first
// use, so that a launch without a proxy does not parse them.
var special = sync.OnceValue(func() []specialRange {
	return []specialRange{
		{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
		{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
		{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
		{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
		{netip.MustParsePrefix("240.0.0.0/4"), "reserved"}, // and 255.255.255.255, broadcast
		// Cloud metadata services outside link-local: AWS's over IPv6 (a ULA address)
		// and Alibaba Cloud's (in the shared address space).
		{netip.MustParsePrefix("fd00:ec2::254/128"), "cloud-metadata"},
		{netip.MustParsePrefix("100.100.100.200/32"), "cloud-metadata"},
		{netip.MustParsePrefix("::/128"), "unspecified"},
		{netip.MustParsePrefix("::1/128"), "loopback"},
		{netip.MustParsePrefix("fe80::/10"), "link-local"},
		{netip.MustParsePrefix("ff00::/8"), "multicast"},
		// NAT64 (the well-known prefix and RFC 8215's local-use one, which a
		// network's own translator serves as readily) and 6to4 embed an IPv4
		// address that may be one of the above.
		{netip.MustParsePrefix("64:ff9b::/96"), "NAT64"},
		{netip.MustParsePrefix("64:ff9b:1::/48"), "NAT64"},
		{netip.MustParsePrefix("2002::/16"), "6to4"},
	}
})

// A specialRange is one row of special: a prefix and what it is.
type specialRange struct {
	pfx  netip.Prefix
	what string
}

// Special reports whether a (unmapped) lies in a range that only an address rule
// within it may allow, and that range.
func Special(a netip.Addr) (bool, netip.Prefix) {
	a = a.Unmap()
	for _, s := range special() {
		if s.pfx.Contains(a) {
			return true, s.pfx
		}
	}
	return false, netip.Prefix{}
}

// specialWhat names a's special range ("loopback").
func specialWhat(a netip.Addr) string {
	a = a.Unmap()
	for _, s := range special() {
		if s.pfx.Contains(a) {
			return s.what
		}
	}
	return ""
}

// Hosts is a Resolver from a fixed table: a name not in it does not resolve. Tests
// use it (through session's test hook) to map names to loopback servers without DNS.
type Hosts map[string][]netip.Addr

// LookupNetIP returns the table's addresses for host, rooted or not.
func (h Hosts) LookupNetIP(_ context.Context, _ string, host string) ([]netip.Addr, error) {
	if a, ok := h[strings.TrimSuffix(host, ".")]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "not in the table", Name: host, IsNotFound: true}
}

// ParseHosts reads "NAME=ADDR[,NAME=ADDR…]" into a table.
func ParseHosts(s string) (Hosts, error) {
	h := Hosts{}
	for _, kv := range strings.Split(s, ",") {
		if kv == "" {
			continue
		}
		name, addr, ok := strings.Cut(kv, "=")
		a, err := netip.ParseAddr(addr)
		if !ok || err != nil {
			return nil, fmt.Errorf("hosts entry %q: want NAME=ADDRESS", kv)
		}
		n, err := CanonicalName(name)
		if err != nil {
			return nil, fmt.Errorf("hosts entry %q: %v", kv, err)
		}
		h[n] = append(h[n], a)
	}
	return h, nil
}

// misuse explains the values users mean as something else: a URL, or a list in one
// value. The host of a URL is offered, not taken: its path and scheme say nothing
// the proxy could enforce.
func misuse(spec string) string {
	if strings.IndexFunc(spec, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return "" // the hint repeats the value: never a control character (the message stays one line)
	}
	if scheme, rest, ok := strings.Cut(spec, "://"); ok && scheme != "" && !strings.ContainsAny(scheme, ".:/") {
		host, _, _ := strings.Cut(rest, "/")
		if _, h, ok := strings.Cut(host, "@"); ok {
			host = h
		}
		return fmt.Sprintf("give a host name, not a URL: --allow-net %s", host)
	}
	if strings.Contains(spec, ",") {
		return "one host or preset per value: repeat the flag (--allow-net " + strings.Join(strings.Split(spec, ","), " --allow-net ") + ")"
	}
	return ""
}
