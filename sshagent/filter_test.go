package sshagent

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/binary"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/pace"
)

func signMsg(key, data []byte) []byte {
	m := appendString([]byte{msgSignRequest}, key)
	m = appendString(m, data)
	return binary.BigEndian.AppendUint32(m, 0)
}

func TestFilterListsAndSignsOnlyChosenKeys(t *testing.T) {
	up, f := startFake(t)
	sel, err := ParseSelector("two")
	if err != nil {
		t.Fatal(err)
	}
	path, s := serveFilter(t, Config{Upstream: up, Keys: NewAllowed([]Selector{sel})})
	ids, err := parseIdentities(ask(t, path, []byte{msgRequestIdentities}))
	if err != nil || len(ids) != 1 || ids[0].Comment != "two" {
		t.Fatalf("identities = %+v, %v; want only \"two\"", ids, err)
	}
	if r := ask(t, path, signMsg(f.ids[1].Blob, []byte("data"))); r[0] != msgSignResponse {
		t.Fatalf("sign with the chosen key: reply %d", r[0])
	}
	if r := ask(t, path, signMsg(f.ids[0].Blob, []byte("data"))); r[0] != msgFailure {
		t.Fatalf("sign with the other key: reply %d, want failure", r[0])
	}
	ev, _ := s.Events()
	if len(ev) != 2 || !ev[0].Allowed || ev[1].Allowed || ev[1].Key != Fingerprint(f.ids[0].Blob) {
		t.Fatalf("events = %+v", ev)
	}
}

func TestFilterRefusesChanges(t *testing.T) {
	up, f := startFake(t)
	path, s := serveFilter(t, Config{Upstream: up})
	for _, m := range [][]byte{
		{msgAddIdentity, 0, 0, 0, 0}, {msgRemoveIdentity, 0, 0, 0, 0}, {msgRemoveAll}, {msgLock, 0, 0, 0, 0},
		{msgUnlock}, {msgAddSmartcard}, {msgAddIDConstrained}, {99},
		appendString([]byte{msgExtension}, []byte("query")),
		appendString([]byte{msgExtension}, []byte("restrict-destination-v00@openssh.com")),
	} {
		if r := ask(t, path, m); !bytes.Equal(r, failure) {
			t.Errorf("message %d: reply %v, want failure", m[0], r)
		}
	}
	// None reached the user's agent (which would have said yes).
	select {
	case b := <-f.seen:
		t.Fatalf("message %d reached the user's agent", b)
	default:
	}
	if ev, _ := s.Events(); len(ev) != 10 {
		t.Fatalf("recorded %d events, want 10: %+v", len(ev), ev)
	}
}

func TestFilterWithRulesNeedsBinding(t *testing.T) {
	up, f := startFake(t)
	path, s := serveFilter(t, Config{Upstream: up, Rules: mustRules(t, "github.com")})
	if r := ask(t, path, signMsg(f.ids[0].Blob, []byte("data"))); r[0] != msgFailure {
		t.Fatalf("unbound sign under --allow-net: reply %d, want failure", r[0])
	}
	ev, _ := s.Events()
	if len(ev) != 1 || ev[0].Allowed || !strings.Contains(ev[0].Reason, "session-bind") {
		t.Fatalf("events = %+v", ev)
	}
}

func TestCheckSelectors(t *testing.T) {
	_, f := startFake(t)
	fp, _ := ParseSelector(Fingerprint(f.ids[0].Blob))
	other, _ := ParseSelector("SHA256:nothing")
	if err := NewAllowed([]Selector{fp}).Check(f.ids); err != nil {
		t.Fatal(err)
	}
	if err := NewAllowed([]Selector{fp, other}).Check(f.ids); err == nil || !strings.Contains(err.Error(), "SHA256:nothing") {
		t.Fatalf("Check = %v", err)
	}
	if _, err := ParseSelector("/nonexistent/key.pub"); err == nil {
		t.Fatal("missing key file accepted")
	}
}

// Hostile clients: a huge length ends the connection without an allocation; a
// flood beyond MaxConns is turned away while the server keeps serving; a client
// that stalls is cut off by Close.
func TestFilterHostileClients(t *testing.T) {
	up, _ := startFake(t)
	path, s := serveFilter(t, Config{Upstream: up})
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write([]byte{0xff, 0xff, 0xff, 0xff, 1})
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("huge length: read %d bytes, want the connection closed", n)
	}
	c.Close()
	var hold []net.Conn
	for range 4 * MaxConns {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte{0, 0}) // half a length: stalls
		hold = append(hold, c)
	}
	// The server turns them away as it accepts them, which a loaded machine
	// delays: look again until enough are closed. The ones served stall for
	// MessageTimeout, far beyond this bound against a hang.
	closed := map[net.Conn]bool{}
	for deadline := time.Now().Add(time.Minute); len(closed) < 3*MaxConns && time.Now().Before(deadline); {
		for _, c := range hold {
			if closed[c] {
				continue
			}
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			if _, err := c.Read(make([]byte, 1)); err != nil && !isTimeout(err) {
				closed[c] = true
			}
		}
	}
	if len(closed) < 3*MaxConns {
		t.Fatalf("%d of %d flooding connections were turned away, want at least %d", len(closed), len(hold), 3*MaxConns)
	}
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close stalled behind stalled clients")
	}
	for _, c := range hold {
		c.Close()
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestCloseDoesNotWaitForTheUserAgent: a sign request the user's agent never
// answers (a confirmation nobody gives) does not hold the session's end.
func TestCloseDoesNotWaitForTheUserAgent(t *testing.T) {
	_, f := startFake(t)
	up := filepath.Join(t.TempDir(), "stall")
	l, err := net.Listen("unix", up)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	asked := make(chan struct{}, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				for {
					msg, err := readMessage(c)
					if err != nil {
						return
					}
					if msg[0] == msgRequestIdentities {
						_ = writeMessage(c, marshalIdentities(f.ids))
						continue
					}
					select { // anything else: never answered
					case asked <- struct{}{}:
					default:
					}
				}
			}()
		}
	}()
	path, s := serveFilter(t, Config{Upstream: up})
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := writeMessage(c, signMsg(f.ids[0].Blob, []byte("data"))); err != nil {
		t.Fatal(err)
	}
	select {
	case <-asked: // the request is with the user's agent
	case <-time.After(time.Minute):
		t.Fatal("the sign request never reached the user's agent")
	}
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for the user's agent")
	}
}

// TestEventsBounded: text from the sandbox (an extension's name, a host key type in
// an error) is clipped and made printable before it is recorded.
func TestEventsBounded(t *testing.T) {
	up, _ := startFake(t)
	path, s := serveFilter(t, Config{Upstream: up})
	long := strings.Repeat("\x1b[2J", 20000)
	ask(t, path, appendString([]byte{msgExtension}, []byte(long)))
	bind := appendString(appendString([]byte{msgExtension}, []byte(extSessionBind)), appendString(nil, []byte(long)))
	bind = appendString(appendString(bind, []byte("id")), appendString(appendString(nil, []byte("x")), []byte("sig")))
	ask(t, path, append(bind, 0))
	ev, _ := s.Events()
	if len(ev) != 2 {
		t.Fatalf("events = %d, want 2", len(ev))
	}
	for _, e := range ev {
		if len(e.Op)+len(e.Reason) > 2*maxField+8 || strings.ContainsRune(e.Op+e.Reason, 0x1b) {
			t.Errorf("event not bounded or not printable: %d+%d bytes: %q", len(e.Op), len(e.Reason), e.Reason)
		}
	}
}

// sessionBind is a session-bind for a session id, signed by host key priv.
func sessionBind(priv ed25519.PrivateKey, sessionID []byte, forwarding bool) []byte {
	m := appendString([]byte{msgExtension}, []byte(extSessionBind))
	m = appendString(m, edBlob(priv.Public().(ed25519.PublicKey)))
	m = appendString(m, sessionID)
	sig := appendString(appendString(nil, []byte("ssh-ed25519")), ed25519.Sign(priv, sessionID))
	m = appendString(m, sig)
	if forwarding {
		return append(m, 1)
	}
	return append(m, 0)
}

// userauthData is what a client signs to authenticate with key in session id.
func userauthData(sessionID, key []byte) []byte {
	d := appendString(nil, sessionID)
	d = append(d, 50)
	for _, f := range []string{"me", "ssh-connection", "publickey"} {
		d = appendString(d, []byte(f))
	}
	d = append(d, 1)
	d = appendString(d, []byte("ssh-ed25519"))
	return appendString(d, key)
}

// TestFilterBindsOnce: with rules, a connection whose first session-bind was
// refused — ssh -A's binding for the forwarding, or one to a host not allowed —
// takes no later one and signs nothing, so a remote host relaying its own
// bindings over a forwarded agent gets no signature; a first binding to an
// allowed host still signs for its session.
func TestFilterBindsOnce(t *testing.T) {
	up, f := startFake(t)
	allowed := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
	other := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{8}, 32))
	known := "github.com ssh-ed25519 " + base64.StdEncoding.EncodeToString(edBlob(allowed.Public().(ed25519.PublicKey))) + "\n"
	path, s := serveFilter(t, Config{Upstream: up, Rules: mustRules(t, "github.com"), KnownHosts: ParseKnownHosts(strings.NewReader(known))})
	hop := bytes.Repeat([]byte{2}, 32)
	for _, first := range []struct {
		name string
		msg  []byte
	}{
		{"forwarding", sessionBind(allowed, bytes.Repeat([]byte{1}, 32), true)},
		{"host not allowed", sessionBind(other, bytes.Repeat([]byte{1}, 32), false)},
		{"malformed", appendString([]byte{msgExtension}, []byte(extSessionBind))},
	} {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range [][]byte{first.msg, sessionBind(allowed, hop, false), signMsg(f.ids[0].Blob, userauthData(hop, f.ids[0].Blob))} {
			if err := writeMessage(c, m); err != nil {
				t.Fatal(err)
			}
			if r, err := readMessage(c); err != nil || !bytes.Equal(r, failure) {
				t.Errorf("%s, then message %d: reply %v, %v; want failure", first.name, i, r, err)
			}
		}
		c.Close()
	}
	// A connection that binds first to an allowed host is signed for.
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i, m := range [][]byte{sessionBind(allowed, hop, false), signMsg(f.ids[0].Blob, userauthData(hop, f.ids[0].Blob))} {
		if err := writeMessage(c, m); err != nil {
			t.Fatal(err)
		}
		if r, err := readMessage(c); err != nil || bytes.Equal(r, failure) {
			t.Fatalf("bound to an allowed host, message %d: reply %v, %v", i, r, err)
		}
	}
	if ev, _ := s.Events(); !hasEvent(ev, "sign", true, "github.com") {
		t.Fatalf("events = %+v", ev)
	}
}

// TestBindsPaced: session-binds are verified at BindGap's pace (here a gate of
// one an hour), a bind that needs no verification (a second one on a bound
// connection) is refused at once, and Close ends a wait for the gate.
func TestBindsPaced(t *testing.T) {
	up, _ := startFake(t)
	allowed := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
	known := "github.com ssh-ed25519 " + base64.StdEncoding.EncodeToString(edBlob(allowed.Public().(ed25519.PublicKey))) + "\n"
	s := New(Config{Upstream: up, Rules: mustRules(t, "github.com"), KnownHosts: ParseKnownHosts(strings.NewReader(known))})
	s.binds = pace.NewGate(time.Hour, 1)
	path := filepath.Join(t.TempDir(), "filtered")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = s.Serve(l) }()
	dial := func() net.Conn {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	first, second := dial(), dial()
	bind := sessionBind(allowed, bytes.Repeat([]byte{1}, 32), false)
	if r := exchangeT(t, first, bind); !bytes.Equal(r, []byte{msgSuccess}) {
		t.Fatalf("the burst's bind: %v", r)
	}
	if r := exchangeT(t, first, bind); !bytes.Equal(r, failure) {
		t.Fatalf("a second bind on a bound connection: %v", r)
	}
	if err := writeMessage(second, bind); err != nil {
		t.Fatal(err)
	}
	second.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if r, err := readMessage(second); !isTimeout(err) {
		t.Fatalf("a bind past the gate was verified at once: %v, %v", r, err)
	}
	closed := make(chan struct{})
	go func() { s.Close(); <-served; close(closed) }()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close waited for the gate")
	}
}

// exchangeT sends msg on c and returns the answer.
func exchangeT(t *testing.T, c net.Conn, msg []byte) []byte {
	t.Helper()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	r, err := exchange(c, msg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestBindsBounded: without rules a connection takes MaxBinds session-binds
// (OpenSSH's agent keeps as many) and refuses the next unverified; an RSA host
// key past maxRSABits or maxRSAExponent is refused before the verification,
// whose cost grows with both (16384 bits: tens of milliseconds of the
// launcher's CPU for one message).
func TestBindsBounded(t *testing.T) {
	up, _ := startFake(t)
	host := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
	path, s := serveFilter(t, Config{Upstream: up})
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range MaxBinds + 1 {
		r := exchangeT(t, c, sessionBind(host, bytes.Repeat([]byte{byte(i + 1)}, 32), false))
		if want := i < MaxBinds; bytes.Equal(r, []byte{msgSuccess}) != want {
			t.Fatalf("bind %d: %v, want success %t", i+1, r, want)
		}
	}
	if ev, _ := s.Events(); len(ev) == 0 || !strings.Contains(ev[len(ev)-1].Reason, "more than 16 session-binds") {
		t.Errorf("the refused bind's event: %+v", ev)
	}

	rsaBind := func(nbytes int, e []byte) []byte {
		n := bytes.Repeat([]byte{0xff}, nbytes)
		key := appendString(appendString(appendString(nil, []byte("ssh-rsa")), e), append([]byte{0}, n...))
		sig := appendString(appendString(nil, []byte("rsa-sha2-512")), bytes.Repeat([]byte{1}, nbytes))
		body := appendString(appendString(appendString(nil, key), make([]byte, 32)), sig)
		return append(body, 0)
	}
	for _, c := range []struct {
		name, why string
		body      []byte
	}{
		{"16384 bits", "longer than 8192", rsaBind(2048, []byte{1, 0, 1})},
		{"exponent 2^31-1", "exponent above 65537", rsaBind(256, []byte{0x7f, 0xff, 0xff, 0xff})},
	} {
		if _, err := parseSessionBind(c.body); err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: %v, want %q", c.name, err, c.why)
		}
	}
	if _, err := parseSessionBind(rsaBind(512, []byte{1, 0, 1})); err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Errorf("a 4096-bit key was not verified: %v", err)
	}
}

// TestMessagesPaced: the messages of every connection are answered at
// MessageGap's pace (here a gate of two, then one an hour), so that one
// connection's loop of requests cannot have the launcher answer as fast as the
// sandbox asks; Close ends a wait.
func TestMessagesPaced(t *testing.T) {
	up, _ := startFake(t)
	s := New(Config{Upstream: up})
	s.messages = pace.NewGate(time.Hour, 2)
	path := filepath.Join(t.TempDir(), "filtered")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = s.Serve(l) }()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 2 {
		if r := exchangeT(t, c, []byte{msgRequestIdentities}); r[0] != msgIdentitiesAnswer {
			t.Fatalf("request %d: %v", i+1, r)
		}
	}
	if err := writeMessage(c, []byte{msgRequestIdentities}); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if r, err := readMessage(c); !isTimeout(err) {
		t.Fatalf("a message past the gate was answered at once: %v, %v", r, err)
	}
	closed := make(chan struct{})
	go func() { s.Close(); <-served; close(closed) }()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close waited for the gate")
	}
}
