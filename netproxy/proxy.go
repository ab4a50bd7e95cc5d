package netproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/internal/pace"
)

// Resolver looks host names up (net.Resolver has this method).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer connects to an address the proxy has decided on (net.Dialer has this
// method). It gets "IP:port", never a name: the proxy resolves once and checks
// what it dials.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Config says what a Server allows and how far it goes. Zero values pick the
// defaults named on each field.
type Config struct {
	Rules Rules
	// Resolver: nil means Go's own resolver (net.Resolver with PreferGo), which
	// takes a rooted name as it is in /etc/hosts and DNS alike, whatever the
	// build and the host's name-service modules.
	Resolver Resolver
	// Dialer: nil means a net.Dialer with DialTimeout.
	Dialer Dialer
	// MaxConns bounds the client connections served at once; more wait in the
	// listener's backlog. 0: DefaultMaxConns.
	MaxConns int
	// IdleTimeout ends a connection (a tunnel, or a kept-alive HTTP connection)
	// through which nothing has moved, in either direction, for this long.
	// 0: DefaultIdleTimeout.
	IdleTimeout time.Duration
	// HandshakeTimeout bounds the time a client has to say where it wants to go,
	// and the resolution and dial on its behalf. 0: DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// LocalAddrs lists this host's own addresses, asked at each decision (an
	// interface may come up during a session). A service listening on every
	// interface answers on each of them as on loopback, so they are special like
	// loopback: only a rule listing the very address allows it. nil: the host's
	// interface addresses (net.InterfaceAddrs). An error (the launcher out of
	// descriptors or memory for the netlink dumps) makes every address one of
	// them for that decision: only a rule listing the very address allows it.
	LocalAddrs func() ([]netip.Addr, error)

	// endGate: nil means one of endGap, burst endBurst (the tests' own is slower).
	endGate *pace.Gate
}

// Defaults of Config.
const (
	DefaultMaxConns         = 256
	DefaultIdleTimeout      = 10 * time.Minute // a model's response may pause for minutes
	DefaultHandshakeTimeout = 30 * time.Second
	maxRefusalKinds         = 1000 // distinct (host, port, reason) rows kept
	// endGap and endBurst pace the connections that end without a tunnel
	// (endGate): at most 100 a second after a burst of 64.
	endGap   = 10 * time.Millisecond
	endBurst = 64
)

// Refusal is one kind of request the proxy refused, with how often.
type Refusal struct {
	Host   string `json:"host"` // as asked for, canonical; quoted when it was no host name
	Port   int    `json:"port"`
	Reason string `json:"reason"`
	Count  int    `json:"count"`
	// Failed: the rules allowed the request but the host could not be reached
	// (resolved, connected to): not a refusal, a failure upstream.
	Failed bool `json:"failed,omitempty"`
}

// Server is the proxy for one session. Serve it on one listener; Close ends it.
type Server struct {
	cfg Config
	sem chan struct{}
	// endGate paces the release of a client's slot when its connection ended
	// without a tunnel: a refusal, an upstream failure, a malformed request, a
	// connection closed unused. Such a connection is no traffic of the session's,
	// and each costs the launcher (outside the session's --cpus) about three
	// times the CPU time it costs the command: unpaced, a loop of refused
	// requests had the host spend a multiple of --cpus on top of the session.
	endGate   *pace.Gate
	done      chan struct{}
	closeOnce sync.Once
	ctx       context.Context // cancelled by Close: resolutions and dials end
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	mu       sync.Mutex
	conns    map[*trackedConn]struct{}
	refusals []Refusal
	index    map[[3]string]int
	dropped  int // refusals beyond maxRefusalKinds
}

// New returns a server for cfg.
func New(cfg Config) *Server {
	if cfg.Resolver == nil {
		cfg.Resolver = &net.Resolver{PreferGo: true}
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.Dialer == nil {
		cfg.Dialer = &net.Dialer{Timeout: cfg.HandshakeTimeout}
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.LocalAddrs == nil {
		cfg.LocalAddrs = interfaceAddrs
	}
	if cfg.endGate == nil {
		cfg.endGate = pace.NewGate(endGap, endBurst)
	}
	s := &Server{
		cfg:     cfg,
		sem:     make(chan struct{}, cfg.MaxConns),
		endGate: cfg.endGate,
		done:    make(chan struct{}),
		conns:   map[*trackedConn]struct{}{},
		index:   map[[3]string]int{},
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s
}

// Serve accepts connections on l until Close, or until l fails. Each is HTTP (a
// CONNECT tunnel or a request for an http:// URL) or SOCKS5, told apart by its
// first byte. Serve closes l when it returns.
//
// The proxy is not net/http's: every agentbox process, the sandbox's init too, would
// pay for that package's initialisation at every start. It needs little of HTTP: the
// request's head is read here (http.go), and after it the bytes go through unparsed,
// a tunnel to the one decided host.
func (s *Server) Serve(l net.Listener) error {
	// Close ends Accept by closing l; so does a return for any other reason.
	ended := make(chan struct{})
	defer close(ended)
	go func() {
		select {
		case <-s.done:
		case <-ended:
		}
		l.Close()
	}()
	for {
		select {
		case s.sem <- struct{}{}:
		case <-s.done:
			return nil
		}
		c, err := l.Accept()
		if err != nil {
			<-s.sem
			select {
			case <-s.done:
				return nil
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			// EMFILE and the like: wait a little rather than spin.
			select {
			case <-time.After(50 * time.Millisecond):
				continue
			case <-s.done:
				return nil
			}
		}
		tc := s.track(c) // counts the goroutine below in wg
		if tc == nil {
			continue
		}
		go func() {
			defer s.wg.Done()
			defer s.release(tc)
			defer s.recoverConn(tc)
			s.dispatch(tc)
		}()
	}
}

// Close stops the server: the listener, every connection it serves and every one
// it dialled; it returns once all its goroutines have ended.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		close(s.done)
		s.mu.Unlock()
		s.cancel()
		s.mu.Lock()
		for c := range s.conns {
			c.Conn.Close()
		}
		s.mu.Unlock()
	})
	s.wg.Wait()
	return nil
}

// Refusals are the refused requests so far, one row per host, port and reason,
// in the order first seen; past maxRefusalKinds rows, a last row counts the rest.
func (s *Server) Refusals() []Refusal {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := append([]Refusal(nil), s.refusals...)
	if s.dropped > 0 {
		out = append(out, Refusal{Host: "(others)", Reason: "more kinds than recorded", Count: s.dropped})
	}
	return out
}

// refusal is a request the rules do not allow.
type refusal struct {
	host   string // for the record
	port   uint16
	reason string // for the record: short
	msg    string // for the client: "agentbox: … is not in --allow-net"
	failed bool   // allowed, but upstream failed (Refusal.Failed)
}

func (r *refusal) Error() string { return r.msg }

func (s *Server) record(r *refusal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := [3]string{r.host, strconv.Itoa(int(r.port)), strconv.FormatBool(r.failed) + r.reason}
	if i, ok := s.index[key]; ok {
		s.refusals[i].Count++
		return
	}
	if len(s.refusals) >= maxRefusalKinds {
		s.dropped++
		return
	}
	s.index[key] = len(s.refusals)
	s.refusals = append(s.refusals, Refusal{Host: r.host, Port: int(r.port), Reason: r.reason, Count: 1, Failed: r.failed})
}

// hostForRecord is a client's host string made safe to print: canonical when it is a
// name or address, else quoted and cut short.
func hostForRecord(h string) string {
	if c, err := CanonicalName(h); err == nil {
		return c
	}
	if len(h) > 80 {
		h = h[:80] + "..."
	}
	return strconv.QuoteToASCII(h)
}

// Decide applies the rules to a client's request for host (a name or an address
// literal) at port: the addresses to dial, or a refusal (an error whose text is the
// message for the client). A name is resolved once, here; every address it resolves
// to is checked again, and only the ones that pass are returned.
func (s *Server) Decide(ctx context.Context, host string, port uint16) ([]netip.Addr, error) {
	addrs, ref, err := s.decide(ctx, host, port)
	if ref != nil {
		s.record(ref)
		return nil, ref
	}
	if err != nil {
		s.failed(host, port, "cannot resolve")
	}
	return addrs, err
}

func (s *Server) decide(ctx context.Context, host string, port uint16) ([]netip.Addr, *refusal, error) {
	name, err := CanonicalName(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	if err != nil || port == 0 {
		h := hostForRecord(host)
		return nil, &refusal{host: h, port: port, reason: "bad host name or port", msg: fmt.Sprintf("agentbox: %s port %d is not a host name and port", h, port)}, nil
	}
	// This host's addresses, asked once a decision needs them: a name or an
	// address no rule lists is refused without the dumps they cost. When they
	// cannot be listed, every address may be one of them: only a rule listing
	// the very address allows it (the check fails closed, not open).
	var local map[netip.Addr]bool
	var localErr error
	isLocal := func(a netip.Addr) bool {
		if local == nil && localErr == nil {
			local, localErr = s.localSet()
		}
		return localErr != nil || local[a.Unmap()]
	}
	unlisted := func(what string) *refusal {
		return &refusal{host: name, port: port, reason: "this host's own addresses cannot be listed",
			msg: fmt.Sprintf("agentbox: cannot tell whether %s is one of this host's own addresses (%v); refused", what, localErr)}
	}
	if a, err := netip.ParseAddr(name); err == nil {
		if s.cfg.Rules.matchAddr(a, port, isLocal) {
			return []netip.Addr{a}, nil, nil
		}
		if localErr != nil {
			return nil, unlisted(a.String()), nil
		}
		return nil, &refusal{host: name, port: port, reason: "address not listed", msg: fmt.Sprintf("agentbox: %s is not in --allow-net", joinHostPort(name, port))}, nil
	}
	ok, listed := s.cfg.Rules.MatchName(name, port)
	if !ok {
		what := name
		if listed {
			what = name + ":" + strconv.Itoa(int(port))
		}
		return nil, &refusal{host: name, port: port, reason: "not listed", msg: fmt.Sprintf("agentbox: %s is not in --allow-net", what)}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.HandshakeTimeout)
	defer cancel()
	found, err := s.cfg.Resolver.LookupNetIP(ctx, "ip", lookupName(name))
	if err != nil || len(found) == 0 {
		return nil, nil, fmt.Errorf("agentbox: cannot resolve %s", name)
	}
	var ok4, ok6 []netip.Addr
	var bad netip.Addr
	for _, a := range found {
		a = a.Unmap()
		if sp, _ := Special(a); (sp || isLocal(a)) && !s.cfg.Rules.matchAddr(a, port, isLocal) {
			bad = a
			continue
		}
		if a.Is4() {
			ok4 = append(ok4, a)
		} else {
			ok6 = append(ok6, a)
		}
	}
	if len(ok4)+len(ok6) == 0 {
		if localErr != nil && specialWhat(bad) == "" {
			return nil, unlisted(name + "'s " + bad.String()), nil
		}
		what, kind := specialWhat(bad), "a "+specialWhat(bad)+" address"
		if what == "" {
			what, kind = "this host's own", "one of this host's own addresses,"
		}
		return nil, &refusal{host: name, port: port, reason: "resolves to " + what + " " + bad.String(),
			msg: fmt.Sprintf("agentbox: %s resolves to %s, %s not in --allow-net", name, bad, kind)}, nil
	}
	return append(ok4, ok6...), nil, nil
}

// lookupName is the name the resolver is asked for. A name with a dot is asked
// rooted, so the search list (resolv.conf's search and ndots) cannot turn an
// allowed x.example.com into x.example.com.corp.internal, a host no rule names; a
// single label names a host of the search domains and keeps them.
func lookupName(name string) string {
	if strings.Contains(name, ".") {
		return name + "."
	}
	return name
}

// localSet is this host's own addresses now (Config.LocalAddrs), unmapped.
func (s *Server) localSet() (map[netip.Addr]bool, error) {
	addrs, err := s.cfg.LocalAddrs()
	if err != nil {
		return nil, err
	}
	set := map[netip.Addr]bool{}
	for _, a := range addrs {
		set[a.Unmap()] = true
	}
	return set, nil
}

// interfaceAddrs is every address of the host's interfaces. Listing them can fail
// (each of the two netlink dumps needs a socket and memory of the launcher's, and
// the machine's open-file table is shared with the session); the caller then
// treats every address as one of them, never as none.
func interfaceAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out, nil
}

func joinHostPort(h string, port uint16) string {
	return net.JoinHostPort(h, strconv.Itoa(int(port)))
}

// dial connects to the first of addrs that answers.
// failed records that an allowed request to host could not be served: the host
// did not resolve or did not answer (why, in a few words).
func (s *Server) failed(host string, port uint16, why string) {
	if s.ctx.Err() != nil {
		return // the session ended under it
	}
	s.record(&refusal{host: hostForRecord(host), port: port, reason: why, failed: true})
}

// dialFailure says in a few words why a dial failed, for the record.
func dialFailure(err error) string {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return "connect timed out"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return "unreachable"
	}
	return "cannot connect"
}

func (s *Server) dial(ctx context.Context, addrs []netip.Addr, port uint16) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.HandshakeTimeout)
	defer cancel()
	var first error
	for _, a := range addrs {
		c, err := s.cfg.Dialer.DialContext(ctx, "tcp", netip.AddrPortFrom(a, port).String())
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, first
}

// dispatch tells HTTP from SOCKS5 by the first byte (5 is SOCKS's version; no HTTP
// method starts with it).
func (s *Server) dispatch(tc *trackedConn) {
	_ = tc.SetReadDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	br := bufio.NewReader(tc.Conn)
	first, err := br.Peek(1)
	if err != nil {
		tc.Close()
		return
	}
	if first[0] == socksVersion {
		s.serveSOCKS(tc, br)
		return
	}
	s.serveHTTP(tc, br)
}

// tunnel moves bytes both ways between client and up until both directions end, or
// nothing has moved for the idle timeout; early goes to up first. A direction that
// ends with EOF half-closes the other side, as TCP would.
func (s *Server) tunnel(client *trackedConn, early []byte, up *trackedConn) {
	client.tunnelled = true
	defer client.Close()
	defer up.Close()
	if len(early) > 0 {
		if _, err := up.Conn.Write(early); err != nil {
			return
		}
	}
	act := &activity{}
	act.touch()
	errc := make(chan error, 2)
	pipe := func(dst, src net.Conn) {
		defer func() {
			if r := recover(); r != nil {
				errc <- fmt.Errorf("netproxy: %v", r) // this tunnel only
			}
		}()
		errc <- s.pipe(dst, src, act)
	}
	go pipe(up.Conn, client.Conn)
	go pipe(client.Conn, up.Conn)
	for range 2 {
		if err := <-errc; err != nil {
			return // an error or the idle timeout: both ends go
		}
	}
}

// activity is when bytes last moved through a tunnel, in either direction.
type activity struct {
	mu   sync.Mutex
	last time.Time
}

func (a *activity) touch() { a.mu.Lock(); a.last = time.Now(); a.mu.Unlock() }
func (a *activity) since() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return time.Since(a.last)
}

// pipe copies src to dst in chunks (io.CopyN: between TCP sockets the kernel splices
// them), each under a read deadline of the idle timeout, so that a quiet direction
// lasts as long as the other one moves. nil: src ended (EOF), and dst was
// half-closed.
func (s *Server) pipe(dst, src net.Conn, act *activity) error {
	idle := s.cfg.IdleTimeout
	for {
		_ = src.SetReadDeadline(time.Now().Add(idle))
		n, err := io.CopyN(dst, src, 4<<20)
		if n > 0 {
			act.touch()
		}
		if err == nil {
			continue
		}
		if err == io.EOF {
			if cw, ok := dst.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
			return nil
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && act.since() < idle {
			continue
		}
		return err
	}
}

// trackedConn is a connection the server owns: closed by Close, untracked once.
// A client's holds a slot of MaxConns until release.
type trackedConn struct {
	net.Conn
	s      *Server
	client bool
	once   sync.Once
	// tunnelled: the connection became a tunnel (set and read on the client's
	// own goroutine).
	tunnelled bool
}

func (s *Server) track(c net.Conn) *trackedConn {
	tc := &trackedConn{Conn: c, s: s, client: true}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.done:
		c.Close()
		<-s.sem
		return nil
	default:
	}
	s.conns[tc] = struct{}{}
	s.wg.Add(1)
	return tc
}

func (s *Server) trackUp(c net.Conn) *trackedConn {
	tc := &trackedConn{Conn: c, s: s}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.done:
		c.Close() // Close ran meanwhile: this one would outlive it
	default:
	}
	s.conns[tc] = struct{}{}
	return tc
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.s.mu.Lock()
		delete(c.s.conns, c)
		c.s.mu.Unlock()
	})
	return err
}

// release closes a client's connection once its handling has ended and frees its
// slot: at once after a tunnel, at endGate's pace otherwise (or at Close). The
// answer was sent already; a loop of requests that carry nothing waits for slots.
func (s *Server) release(tc *trackedConn) {
	tc.Close()
	if !tc.tunnelled {
		s.endGate.WaitOr(s.done)
	}
	<-s.sem
}

// recoverConn keeps a bug in one connection's handling from ending the launcher
// (and with it the session): that connection is closed, the others go on.
func (s *Server) recoverConn(tc *trackedConn) {
	if r := recover(); r != nil {
		tc.Close()
	}
}

// buffered takes what br holds without reading more.
func buffered(br *bufio.Reader) []byte {
	n := br.Buffered()
	if n == 0 {
		return nil
	}
	b := make([]byte, n)
	_, _ = io.ReadFull(br, b)
	return b
}

// Env are the variables that point a command's clients at a proxy listening on
// addr ("127.0.0.1:3128"), upper- and lower-case, with loopback left direct.
func Env(addr string) []string {
	httpURL, socksURL := "http://"+addr, "socks5h://"+addr
	noProxy := "localhost,127.0.0.1,::1"
	var env []string
	for _, kv := range [][2]string{
		{"HTTP_PROXY", httpURL}, {"HTTPS_PROXY", httpURL}, {"ALL_PROXY", socksURL}, {"NO_PROXY", noProxy},
	} {
		env = append(env, kv[0]+"="+kv[1], strings.ToLower(kv[0])+"="+kv[1])
	}
	return env
}
