package netproxy

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/pace"
)

// fixture: two upstream servers on loopback (one listed by address, one not), and
// a proxy whose names resolve through a table.
type fixture struct {
	t              *testing.T
	proxy          *Server
	addr           string // the proxy's
	listed, hidden string // the upstreams' ports
	served         chan error
}

func newFixture(t *testing.T, cfg Config, extra ...string) *fixture {
	t.Helper()
	up := func(body string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s %s host=%s", body, r.URL.Path, r.Host)
		}))
		t.Cleanup(srv.Close)
		u, _ := url.Parse(srv.URL)
		return u.Port()
	}
	f := &fixture{t: t, listed: up("listed"), hidden: up("hidden"), served: make(chan error, 1)}
	lo := netip.MustParseAddr("127.0.0.1")
	cfg.Resolver = Hosts{"allowed.test": {lo}, "rebind.test": {lo}, "other.test": {lo},
		"both.test": {netip.MustParseAddr("::1"), lo}}
	cfg.Rules = mustRules(t, append([]string{"allowed.test", "rebind.test", "both.test", "127.0.0.1:" + f.listed}, extra...)...)
	f.proxy = New(cfg)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = l.Addr().String()
	go func() { f.served <- f.proxy.Serve(l) }()
	t.Cleanup(func() { f.proxy.Close() })
	return f
}

func (f *fixture) client() *http.Client {
	pu, _ := url.Parse("http://" + f.addr)
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}, Timeout: 20 * time.Second}
}

func (f *fixture) get(u string) (int, string) {
	f.t.Helper()
	resp, err := f.client().Get(u)
	if err != nil {
		f.t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// connect sends CONNECT target and returns the status line and the connection.
func (f *fixture) connect(target string) (string, net.Conn, *bufio.Reader) {
	f.t.Helper()
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil {
		f.t.Fatalf("CONNECT %s: %v", target, err)
	}
	for {
		h, err := br.ReadString('\n')
		if err != nil || h == "\r\n" {
			break
		}
	}
	return strings.TrimSpace(line), c, br
}

func TestForward(t *testing.T) {
	f := newFixture(t, Config{})
	if code, body := f.get("http://allowed.test:" + f.listed + "/x"); code != 200 || body != "listed /x host=allowed.test:"+f.listed {
		t.Errorf("allowed: %d %q", code, body)
	}
	if code, body := f.get("http://other.test:" + f.listed + "/"); code != 403 || body != "agentbox: other.test is not in --allow-net\n" {
		t.Errorf("not listed: %d %q", code, body)
	}
	// Listed by name, but it resolves to loopback, which is listed at another port.
	if code, body := f.get("http://rebind.test:" + f.hidden + "/"); code != 403 || !strings.Contains(body, "rebind.test resolves to 127.0.0.1, a loopback address not in --allow-net") {
		t.Errorf("forbidden address: %d %q", code, body)
	}
	if code, body := f.get("http://127.0.0.1:" + f.hidden + "/"); code != 403 || !strings.Contains(body, "127.0.0.1:"+f.hidden+" is not in --allow-net") {
		t.Errorf("raw address: %d %q", code, body)
	}
	if code, _ := f.get("http://127.0.0.1:" + f.listed + "/"); code != 200 {
		t.Errorf("listed address: %d", code)
	}
	// The Host header is the URL's: another would let a shared front end route the
	// request to a host not listed.
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET http://allowed.test:%s/h HTTP/1.1\r\nHost: evil.test\r\nProxy-Connection: keep-alive\r\n\r\n", f.listed)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "listed /h host=allowed.test:"+f.listed {
		t.Errorf("forwarded with the client's Host: %q", b)
	}
	// One address of two forbidden: the other one is dialled.
	if code, _ := f.get("http://both.test:" + f.listed + "/"); code != 200 {
		t.Errorf("both.test: %d", code)
	}
}

func TestConnect(t *testing.T) {
	f := newFixture(t, Config{})
	line, c, br := f.connect("allowed.test:" + f.listed)
	if line != "HTTP/1.1 200 Connection established" {
		t.Fatalf("allowed: %q", line)
	}
	fmt.Fprintf(c, "GET /t HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "listed /t host=allowed.test" {
		t.Errorf("through the tunnel: %q", b)
	}
	for target, want := range map[string]string{
		"other.test:443":                 "HTTP/1.1 403 agentbox: other.test is not in --allow-net",
		"rebind.test:" + f.hidden:        "HTTP/1.1 403 agentbox: rebind.test resolves to 127.0.0.1, a loopback address not in --allow-net",
		"127.0.0.1:" + f.hidden:          "HTTP/1.1 403 agentbox: 127.0.0.1:" + f.hidden + " is not in --allow-net",
		"[::ffff:127.0.0.1]:" + f.hidden: "HTTP/1.1 403 agentbox: 127.0.0.1:" + f.hidden + " is not in --allow-net",
		"x!y:" + f.listed:                "HTTP/1.1 403 agentbox: \"x!y\" port " + f.listed + " is not a host name and port",
		"unlisted.test:22":               "HTTP/1.1 403 agentbox: unlisted.test is not in --allow-net",
	} {
		if line, _, _ := f.connect(target); line != want {
			t.Errorf("CONNECT %s: %q, want %q", target, line, want)
		}
	}
	got := f.proxy.Refusals()
	want := map[string]bool{"other.test 443 not listed": true, "rebind.test " + f.hidden + " resolves to loopback 127.0.0.1": true,
		"127.0.0.1 " + f.hidden + " address not listed": true, `"x!y" ` + f.listed + " bad host name or port": true, "unlisted.test 22 not listed": true}
	for _, r := range got {
		k := fmt.Sprintf("%s %d %s", r.Host, r.Port, r.Reason)
		if !want[k] {
			t.Errorf("unexpected refusal %s (count %d)", k, r.Count)
		}
		if k == "127.0.0.1 "+f.hidden+" address not listed" && r.Count != 2 {
			t.Errorf("%s counted %d times, want 2", k, r.Count)
		}
		delete(want, k)
	}
	for k := range want {
		t.Errorf("refusal not recorded: %s (have %v)", k, got)
	}
}

// socks5 asks the proxy for host:port by name and returns the reply code.
func socks5(t *testing.T, proxy, host string, port uint16) (byte, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.Write([]byte{5, 1, 0})
	var hello [2]byte
	if _, err := io.ReadFull(c, hello[:]); err != nil || hello != [2]byte{5, 0} {
		t.Fatalf("greeting: %v %v", hello, err)
	}
	req := append([]byte{5, 1, 0, 3, byte(len(host))}, host...)
	req = binary.BigEndian.AppendUint16(req, port)
	c.Write(req)
	var rep [10]byte
	if _, err := io.ReadFull(c, rep[:]); err != nil {
		t.Fatalf("reply: %v", err)
	}
	return rep[1], c
}

func TestSOCKS5(t *testing.T) {
	f := newFixture(t, Config{})
	var port uint16
	fmt.Sscan(f.listed, &port)
	rep, c := socks5(t, f.addr, "allowed.test", port)
	if rep != 0 {
		t.Fatalf("allowed: reply %d", rep)
	}
	fmt.Fprintf(c, "GET /s HTTP/1.0\r\nHost: allowed.test\r\n\r\n")
	b, _ := io.ReadAll(c)
	if !strings.HasSuffix(string(b), "listed /s host=allowed.test") {
		t.Errorf("through SOCKS: %q", b)
	}
	if rep, _ := socks5(t, f.addr, "other.test", port); rep != repNotAllowed {
		t.Errorf("not listed: reply %d", rep)
	}
	if len(f.proxy.Refusals()) != 1 || f.proxy.Refusals()[0].Host != "other.test" {
		t.Errorf("refusals: %v", f.proxy.Refusals())
	}
}

// A tunnel through which nothing moves ends after the idle timeout; one that moves
// does not.
func TestIdleTimeout(t *testing.T) {
	f := newFixture(t, Config{IdleTimeout: 300 * time.Millisecond})
	line, c, _ := f.connect("allowed.test:" + f.listed)
	if !strings.Contains(line, "200") {
		t.Fatal(line)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var b [1]byte
	if _, err := c.Read(b[:]); err != io.EOF {
		t.Errorf("idle tunnel: read %v, want EOF from the proxy", err)
	}
}

// MaxConns: a connection beyond the limit is not served until one ends.
func TestMaxConns(t *testing.T) {
	f := newFixture(t, Config{MaxConns: 1})
	line, first, _ := f.connect("allowed.test:" + f.listed)
	if !strings.Contains(line, "200") {
		t.Fatal(line)
	}
	second, err := net.Dial("tcp", f.addr) // queued in the backlog
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	fmt.Fprintf(second, "CONNECT allowed.test:%s HTTP/1.1\r\nHost: x\r\n\r\n", f.listed)
	second.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	var b [1]byte
	if n, err := second.Read(b[:]); n != 0 || !isTimeout(err) {
		t.Fatalf("second connection served beyond MaxConns: %d %v", n, err)
	}
	first.Close()
	second.SetReadDeadline(time.Now().Add(20 * time.Second))
	line, err = bufio.NewReader(second).ReadString('\n')
	if err != nil || !strings.Contains(line, "200") {
		t.Errorf("second connection after the first ended: %q %v", line, err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// Close ends the listener and every tunnel, and Serve returns.
func TestClose(t *testing.T) {
	f := newFixture(t, Config{})
	_, c, _ := f.connect("allowed.test:" + f.listed)
	f.proxy.Close()
	if err := <-f.served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	var b [1]byte
	if _, err := c.Read(b[:]); err == nil || isTimeout(err) {
		t.Errorf("tunnel after Close: %v", err)
	}
	if c, err := net.Dial("tcp", f.addr); err == nil {
		c.Close()
		t.Error("still listening after Close")
	}
}

// Requests that are not for the proxy are answered, not forwarded.
func TestBadRequests(t *testing.T) {
	f := newFixture(t, Config{})
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 400 {
		t.Errorf("origin-form request: %v %v", resp, err)
	}
	if code, _ := f.get("http://allowed.test:99999/"); code != 400 {
		t.Errorf("bad port: %d", code)
	}
}

// TestDecideHostOwnAddress: an allowed name that resolves to one of this host's own
// addresses (not loopback: an interface's, where a service on 0.0.0.0 answers too),
// or that address written as a literal under a prefix rule, is refused as loopback
// is; a rule naming exactly the address allows it. Cloud metadata outside
// link-local (AWS over IPv6, Alibaba Cloud) is refused like 169.254.169.254.
func TestDecideHostOwnAddress(t *testing.T) {
	own := netip.MustParseAddr("192.0.2.2")
	rules := func(specs ...string) Rules {
		rs, err := ParseAll(specs)
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	cases := []struct {
		rules []string
		host  string
		ok    bool
	}{
		{[]string{"rebind.test"}, "rebind.test", false},
		{[]string{"192.0.2.0/24"}, "192.0.2.2", false},
		{[]string{"0.0.0.0/0"}, "192.0.2.2", false},
		{[]string{"0.0.0.0/0"}, "192.0.2.3", true},
		{[]string{"192.0.2.2"}, "192.0.2.2", true},
		{[]string{"rebind.test", "192.0.2.2:80"}, "rebind.test", true},
		{[]string{"::/0"}, "[::ffff:192.0.2.2]", false},
		{[]string{"imds6.test"}, "imds6.test", false},
		{[]string{"::/0"}, "[fd00:ec2::254]", false},
		{[]string{"0.0.0.0/0"}, "100.100.100.200", false},
		{[]string{"fd00:ec2::254"}, "[fd00:ec2::254]", true},
	}
	for _, c := range cases {
		s := New(Config{
			Rules:      rules(c.rules...),
			Resolver:   Hosts{"rebind.test": {own}, "imds6.test": {netip.MustParseAddr("fd00:ec2::254")}},
			LocalAddrs: func() ([]netip.Addr, error) { return []netip.Addr{netip.MustParseAddr("127.0.0.1"), own}, nil },
		})
		addrs, err := s.Decide(context.Background(), c.host, 80)
		if (err == nil) != c.ok {
			t.Errorf("--allow-net %v, %s:80: got %v %v, want allowed=%t", c.rules, c.host, addrs, err, c.ok)
		}
		if !c.ok && err != nil && !strings.Contains(err.Error(), "agentbox: ") {
			t.Errorf("refusal without the proxy's message: %v", err)
		}
		s.Close()
	}
}

// TestEndsPaced: a connection that ends without a tunnel (refused, malformed,
// closed unused) is answered at once but holds its slot until endGate lets it go,
// so that a loop of refused requests runs at the gate's pace, not the launcher's
// (each costs the launcher, outside --cpus, more than it costs the command).
// Tunnels do not wait; Close ends the waits.
func TestEndsPaced(t *testing.T) {
	f := newFixture(t, Config{MaxConns: 2, endGate: pace.NewGate(time.Hour, 1)})
	for i := range 5 {
		line, c, _ := f.connect("allowed.test:" + f.listed)
		if !strings.Contains(line, "200") {
			t.Fatalf("tunnel %d: %s", i, line)
		}
		c.Close()
	}
	// The first refusal has the burst's turn; the next two hold both slots.
	for i := range 3 {
		if line, _, _ := f.connect("other.test:443"); !strings.Contains(line, "403") {
			t.Fatalf("refusal %d: %s", i, line)
		}
	}
	c, err := net.Dial("tcp", f.addr) // queued in the backlog
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT other.test:443 HTTP/1.1\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	var b [1]byte
	if n, err := c.Read(b[:]); n != 0 || !isTimeout(err) {
		t.Fatalf("a fourth refusal was served while both slots waited for the gate: %d %v", n, err)
	}
	closed := make(chan struct{})
	go func() { f.proxy.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close waited for the gate")
	}
}

// TestLocalAddrsAskedWhenNeeded: this host's addresses (two netlink dumps) are
// asked only for a decision they can change: not for a name no rule lists, nor
// for an address no rule holds.
func TestLocalAddrsAskedWhenNeeded(t *testing.T) {
	asked := 0
	srv := New(Config{Rules: mustRules(t, "allowed.test", "10.0.0.0/8"),
		Resolver:   Hosts{"allowed.test": {netip.MustParseAddr("192.0.2.1")}},
		LocalAddrs: func() ([]netip.Addr, error) { asked++; return []netip.Addr{netip.MustParseAddr("10.1.2.3")}, nil }})
	for _, host := range []string{"other.test", "192.0.2.7", "[2001:db8::1]"} {
		if _, err := srv.Decide(context.Background(), host, 443); err == nil {
			t.Errorf("%s allowed", host)
		}
	}
	if asked != 0 {
		t.Errorf("the host's addresses were asked %d times for requests no rule allows", asked)
	}
	if _, err := srv.Decide(context.Background(), "10.1.2.3", 443); err == nil {
		t.Error("this host's own 10.1.2.3 allowed by 10.0.0.0/8")
	}
	if _, err := srv.Decide(context.Background(), "allowed.test", 443); err != nil {
		t.Errorf("allowed.test: %v", err)
	}
	if asked != 2 {
		t.Errorf("the host's addresses were asked %d times for two decisions that need them", asked)
	}
}

// TestLocalAddrsUnlistedRefuses: when this host's own addresses cannot be listed
// (the launcher out of descriptors or memory for the netlink dumps; the machine's
// open-file table is shared with the session), an address is not taken to be
// none of them: a name resolving to one of the host's private addresses, or such an
// address under a prefix rule, reached a service listening on every interface. Only
// a rule listing the very address allows it then, and the refusal says why.
func TestLocalAddrsUnlistedRefuses(t *testing.T) {
	own := netip.MustParseAddr("10.1.2.3") // a private address: not special by itself
	srv := New(Config{Rules: mustRules(t, "allowed.test", "10.0.0.0/8", "192.0.2.9"),
		Resolver:   Hosts{"allowed.test": {own}},
		LocalAddrs: func() ([]netip.Addr, error) { return nil, errors.New("netlinkrib: too many open files in system") }})
	defer srv.Close()
	for _, host := range []string{"allowed.test", "10.1.2.3"} {
		_, err := srv.Decide(context.Background(), host, 443)
		if err == nil {
			t.Errorf("%s allowed while this host's addresses could not be listed", host)
			continue
		}
		if !strings.Contains(err.Error(), "cannot tell whether") || !strings.Contains(err.Error(), "too many open files") {
			t.Errorf("%s: refusal does not say why: %v", host, err)
		}
	}
	if _, err := srv.Decide(context.Background(), "192.0.2.9", 443); err != nil {
		t.Errorf("an address a rule lists exactly is refused: %v", err)
	}
	var reasons []string
	for _, r := range srv.Refusals() {
		reasons = append(reasons, r.Host+" "+r.Reason)
	}
	if want := "this host's own addresses cannot be listed"; len(reasons) != 2 || !strings.Contains(reasons[0], want) || !strings.Contains(reasons[1], want) {
		t.Errorf("record: %q, want both refusals with %q", reasons, want)
	}
}
