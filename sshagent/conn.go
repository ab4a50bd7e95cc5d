package sshagent

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// conn is one client connection from the sandbox and its own connection to the
// user's agent, so that a session-bind binds the one it came on.
type conn struct {
	s     *Server
	c     net.Conn
	up    *upstreamConn
	bound *binding
	host  string // the bound host, where known
	// bindTried: the client asked to bind this connection, whatever the answer.
	// With rules a connection binds at its first request or never: ssh -A binds
	// each forwarded connection for the forwarding (refused) and then relays what
	// the remote host sends over it, that host's own binding to its next hop
	// included.
	bindTried bool
	binds     int // session-binds asked for on the connection (MaxBinds)
}

var failure = []byte{msgFailure}

func (c *conn) serve() {
	defer c.up.close()
	for {
		_ = c.c.SetReadDeadline(time.Now().Add(MessageTimeout))
		msg, err := readMessage(c.c)
		if err != nil {
			return // EOF, a deadline, or a message too long: the connection ends
		}
		if !c.s.messages.WaitOr(c.s.done) {
			return
		}
		reply := c.handle(msg)
		_ = c.c.SetWriteDeadline(time.Now().Add(MessageTimeout))
		if writeMessage(c.c, reply) != nil {
			return
		}
	}
}

// handle answers one message; anything it does not know is refused.
func (c *conn) handle(msg []byte) []byte {
	switch msg[0] {
	case msgRequestIdentities:
		if len(msg) != 1 {
			return failure
		}
		return c.identities()
	case msgSignRequest:
		return c.sign(msg)
	case msgExtension:
		return c.extension(msg)
	}
	c.s.record(Event{Op: opName(msg[0]), Reason: "the sandbox may not change the user's agent"})
	return failure
}

func opName(t byte) string {
	names := map[byte]string{
		msgAddIdentity: "add", msgAddIDConstrained: "add", msgRemoveIdentity: "remove",
		msgRemoveAll: "remove-all", 9: "remove-all-v1", msgAddSmartcard: "add-smartcard", msgAddSmartcardCons: "add-smartcard",
		msgRemoveSmartcard: "remove-smartcard", msgLock: "lock", msgUnlock: "unlock",
	}
	if n, ok := names[t]; ok {
		return n
	}
	return "unknown"
}

func (c *conn) identities() []byte {
	ids, err := c.up.identities()
	if err != nil {
		return failure
	}
	var out []Identity
	for _, id := range ids {
		if c.s.cfg.Keys.Has(id.Blob, ids) {
			out = append(out, id)
		}
	}
	reply := marshalIdentities(out)
	if len(reply) > MaxMessage {
		return failure
	}
	return reply
}

func (c *conn) sign(msg []byte) []byte {
	r := reader{b: msg[1:]}
	key, data := r.string(), r.string()
	r.uint32() // flags: passed on as they are
	if r.done() != nil {
		c.s.record(Event{Op: "sign", Reason: "malformed request"})
		return failure
	}
	ev := Event{Op: "sign", Key: Fingerprint(key), Host: c.host}
	if why := c.refuseSign(key, data); why != "" {
		ev.Reason = why
		c.s.record(ev)
		return failure
	}
	reply, err := c.up.roundTrip(msg)
	if err != nil || reply[0] != msgSignResponse {
		ev.Reason = "the user's agent refused or failed"
		c.s.record(ev)
		return failure
	}
	ev.Allowed = true
	c.s.record(ev)
	return reply
}

// refuseSign says why a signature with key over data is refused ("": it is not).
func (c *conn) refuseSign(key, data []byte) string {
	ids, err := c.up.identities()
	if err != nil {
		return "the user's agent cannot be reached"
	}
	if !c.s.cfg.Keys.Has(key, ids) {
		return "key not allowed (--ssh-key)"
	}
	if c.s.cfg.Rules == nil {
		return ""
	}
	if c.bound == nil && c.bindTried {
		return "with --allow-net, the connection's session-bind was refused (an agent forwarded with ssh -A, or a host not allowed): nothing is signed on it"
	}
	if c.bound == nil {
		return "with --allow-net, only SSH sessions bound to an allowed host are signed for (the client sent no session-bind)"
	}
	u, ok := parseUserauth(data)
	if !ok {
		return "with --allow-net, only SSH user authentication is signed for"
	}
	if !u.matches(c.bound, key) {
		return "the request is not for the session the connection is bound to"
	}
	return ""
}

func (c *conn) extension(msg []byte) []byte {
	r := reader{b: msg[1:]}
	name := string(r.string())
	if r.err != nil {
		return failure
	}
	if name != extSessionBind {
		c.s.record(Event{Op: "extension " + name, Reason: "extension not understood"})
		return failure
	}
	ev := Event{Op: "session-bind"}
	tried := c.bindTried
	c.bindTried = true
	c.binds++
	// What needs no verification is refused before it: a verification is the
	// costly part, and a connection could repeat the message at no cost.
	if why := c.refuseBind(tried); why != "" {
		if hk := (&reader{b: r.b}).string(); hk != nil {
			ev.Key = Fingerprint(hk)
		}
		ev.Reason = why
		c.s.record(ev)
		return failure
	}
	if !c.s.binds.WaitOr(c.s.done) {
		return failure
	}
	b, err := parseSessionBind(r.b)
	if err != nil {
		ev.Reason = err.Error()
		c.s.record(ev)
		return failure
	}
	ev.Key = Fingerprint(b.HostKey)
	host, why := c.bindHost(b)
	ev.Host = host
	if why != "" {
		ev.Reason = why
		c.s.record(ev)
		return failure
	}
	c.bound, c.host = &b, host
	// The user's agent gets the binding too, for its own destination constraints
	// (ssh-add -h); an agent without the extension refuses it, which changes
	// nothing here.
	_, _ = c.up.roundTrip(msg)
	ev.Allowed = true
	c.s.record(ev)
	return []byte{msgSuccess}
}

// refuseBind says why a session-bind is refused whatever it holds ("": it is
// not); tried: an earlier one was asked for on the connection.
func (c *conn) refuseBind(tried bool) string {
	switch {
	case c.s.cfg.Rules == nil && c.binds > MaxBinds:
		return fmt.Sprintf("more than %d session-binds on one connection", MaxBinds)
	case c.s.cfg.Rules == nil:
		return ""
	case c.bound != nil:
		return "the connection is already bound to a session"
	case tried:
		return "the connection asked to bind before and was refused (an agent forwarded with ssh -A relays the remote's bindings)"
	}
	return ""
}

// bindHost decides on a verified binding: the host it names and why it is
// refused.
func (c *conn) bindHost(b binding) (string, string) {
	kh := c.s.cfg.KnownHosts
	host := ""
	if kh != nil {
		if kh.Revoked(b.HostKey) {
			return "", "host key revoked in known_hosts"
		}
		if names := kh.Names(b.HostKey); len(names) > 0 {
			host = names[0]
		}
	}
	if c.s.cfg.Rules == nil {
		return host, ""
	}
	if b.Forwarding {
		return host, "with --allow-net, the agent is not forwarded further"
	}
	allowed := kh.AllowedHost(b.HostKey, c.s.cfg.Rules)
	if allowed == "" {
		return host, "host key not given to an allowed host in known_hosts"
	}
	return allowed, ""
}

// sanitize keeps text from the sandbox printable for the record: every byte
// outside printable ASCII becomes '?' (the "…" clip adds is kept).
func sanitize(s string) string {
	s, clipped := strings.CutSuffix(s, "…")
	b := []byte(s)
	for i, ch := range b {
		if ch < 0x20 || ch >= 0x7f {
			b[i] = '?'
		}
	}
	if clipped {
		return string(b) + "…"
	}
	return string(b)
}

// upstreamConn is a connection to the user's agent, dialled on first use. Close,
// from the server's, ends a round trip in progress: a session's end never waits
// for the user's agent.
type upstreamConn struct {
	path string
	ids  []Identity

	mu     sync.Mutex
	c      net.Conn
	closed bool
}

func (u *upstreamConn) roundTrip(msg []byte) ([]byte, error) {
	c, err := u.conn()
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(UpstreamTimeout))
	reply, err := exchange(c, msg)
	if err != nil {
		u.close() // out of step: a later request dials afresh
	}
	return reply, err
}

// conn is the connection, dialled when there is none.
func (u *upstreamConn) conn() (net.Conn, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return nil, ErrClosed
	}
	if u.c == nil {
		c, err := net.DialTimeout("unix", u.path, 10*time.Second)
		if err != nil {
			return nil, err
		}
		if err := checkPeer(c); err != nil { // peer_linux.go
			c.Close()
			return nil, err
		}
		u.c = c
	}
	return u.c, nil
}

func exchange(c net.Conn, msg []byte) ([]byte, error) {
	if err := writeMessage(c, msg); err != nil {
		return nil, err
	}
	return readMessage(c)
}

// identities lists the agent's keys, once per connection.
func (u *upstreamConn) identities() ([]Identity, error) {
	if u.ids != nil {
		return u.ids, nil
	}
	reply, err := u.roundTrip([]byte{msgRequestIdentities})
	if err != nil {
		return nil, err
	}
	ids, err := parseIdentities(reply)
	if err != nil {
		return nil, errors.New("the user's agent sent a malformed key list")
	}
	if ids == nil {
		ids = []Identity{}
	}
	u.ids = ids
	return ids, nil
}

// close closes the current connection; a later round trip dials again.
func (u *upstreamConn) close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.c != nil {
		u.c.Close()
		u.c = nil
	}
}

// shutdown closes the connection for good.
func (u *upstreamConn) shutdown() {
	u.mu.Lock()
	u.closed = true
	u.mu.Unlock()
	u.close()
}
