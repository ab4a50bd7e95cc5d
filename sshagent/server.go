package sshagent

import (
	"errors"
	"net"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/pace"
	"github.com/agentbox/agentbox/netproxy"
)

// Limits on what the sandbox can make the launcher hold.
const (
	// MaxConns connections are served at once; one more is closed at once, so a
	// flood costs a file descriptor for a moment, not a goroutine that waits.
	MaxConns = 16
	// MessageTimeout is how long a client has to send a whole message once it
	// has started waiting, and to read an answer.
	MessageTimeout = 2 * time.Minute
	// UpstreamTimeout bounds one round trip to the user's agent, which may ask
	// the user to confirm (ssh-add -c) or touch a security key.
	UpstreamTimeout = 2 * time.Minute
	// MaxEvents are recorded; further ones are counted (Dropped).
	MaxEvents = 10000
	// AcceptGap paces the connections taken after a burst of MaxConns
	// (internal/pace: the launcher's work is outside the session's --cpus).
	AcceptGap = 50 * time.Millisecond
	// BindGap paces the session-binds the filter verifies, after a burst of
	// MaxConns: a verification costs the launcher (outside the session's --cpus)
	// up to milliseconds for a large RSA host key, and sending one costs the
	// sandbox a write. A client binds once per SSH connection it makes.
	BindGap = 100 * time.Millisecond
	// MaxBinds bounds the session-binds one connection may make, as OpenSSH's
	// agent does (AGENT_MAX_SESSION_IDS): an agent forwarded hop by hop binds
	// once per hop. With rules a connection binds once (conn.go).
	MaxBinds = 16
	// MessageGap paces the messages the filter answers, over every connection,
	// after a burst of MessageBurst: pacing connections does not pace what one
	// connection sends, and each message costs the launcher (outside --cpus) about
	// five times what it costs the sandbox. A client sends a few per SSH
	// connection or signature.
	MessageGap   = 5 * time.Millisecond
	MessageBurst = 64
)

// Config is what a Server filters by.
type Config struct {
	// Upstream is the user's agent socket (the host's $SSH_AUTH_SOCK).
	Upstream string
	// Keys are the keys the sandbox may list and use (NewAllowed(nil): every key).
	Keys *Allowed
	// Rules, when not nil (--allow-net), restrict signing to user-authentication
	// requests of SSH sessions bound to a host key that KnownHosts gives to a
	// host the rules allow.
	Rules      netproxy.Rules
	KnownHosts *KnownHosts
	// Now stamps events (time.Now when nil).
	Now func() time.Time
}

// Event is one request the filter decided on, for the session record.
type Event struct {
	Time    time.Time
	Op      string // "sign", "session-bind", or the refused request ("remove-all", "lock", "extension foo@bar", …)
	Key     string // the key's fingerprint, when the request names one
	Host    string // the host the connection is bound to, where known
	Allowed bool
	Reason  string // why it was refused
}

// Server serves the filtered agent on listeners.
type Server struct {
	cfg   Config
	slots chan struct{}
	// binds is BindGap's gate; done is closed by Close and ends its waits.
	binds    *pace.Gate
	messages *pace.Gate
	done     chan struct{}

	mu      sync.Mutex
	events  []Event
	dropped int
	conns   map[net.Conn]*upstreamConn
	ls      []net.Listener
	closed  bool
	wg      sync.WaitGroup
}

// New returns a server for cfg.
func New(cfg Config) *Server {
	if cfg.Keys == nil {
		cfg.Keys = NewAllowed(nil)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Server{cfg: cfg, slots: make(chan struct{}, MaxConns), conns: map[net.Conn]*upstreamConn{},
		binds: pace.NewGate(BindGap, MaxConns), messages: pace.NewGate(MessageGap, MessageBurst), done: make(chan struct{})}
}

// ErrClosed is what Serve returns once the server is closed.
var ErrClosed = errors.New("ssh agent filter closed")

// Serve accepts connections on l until Close.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return ErrClosed
	}
	s.ls = append(s.ls, l)
	s.mu.Unlock()
	gate := pace.NewGate(AcceptGap, MaxConns)
	for {
		gate.Wait()
		c, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return ErrClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: do not spin
			continue
		}
		select {
		case s.slots <- struct{}{}:
		default:
			c.Close()
			continue
		}
		up := &upstreamConn{path: s.cfg.Upstream}
		if !s.track(c, up) {
			<-s.slots
			continue
		}
		go func() {
			defer s.wg.Done()
			defer func() { <-s.slots }()
			defer s.untrack(c)
			(&conn{s: s, c: c, up: up}).serve()
		}()
	}
}

func (s *Server) track(c net.Conn, up *upstreamConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	s.conns[c] = up
	s.wg.Add(1)
	return true
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.Close()
}

// Close stops every listener and connection and waits for their goroutines.
func (s *Server) Close() {
	s.mu.Lock()
	if !s.closed {
		close(s.done)
	}
	s.closed = true
	for _, l := range s.ls {
		l.Close()
	}
	for c, up := range s.conns {
		c.Close()
		up.shutdown()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Events returns the recorded events and how many more were dropped.
func (s *Server) Events() ([]Event, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Event(nil), s.events...), s.dropped
}

// maxField bounds each text field of an event: some carry bytes from the sandbox
// (an algorithm name in an error), and the record holds up to MaxEvents of them.
const maxField = 200

func (s *Server) record(e Event) {
	e.Time = s.cfg.Now()
	e.Op, e.Host, e.Reason = clip(e.Op), clip(e.Host), clip(e.Reason)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.events) >= MaxEvents {
		s.dropped++
		return
	}
	s.events = append(s.events, e)
}

// ListIdentities asks the agent at upstream for its keys (to check --ssh-key
// before the launch).
func ListIdentities(upstream string) ([]Identity, error) {
	u := &upstreamConn{path: upstream}
	defer u.close()
	return u.identities()
}

// clip makes s printable and at most maxField bytes long.
func clip(s string) string {
	if len(s) > maxField {
		s = s[:maxField] + "…"
	}
	return sanitize(s)
}
