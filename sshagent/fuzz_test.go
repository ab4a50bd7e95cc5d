package sshagent

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"
)

// FuzzConn feeds a byte stream from a hostile sandbox client to one filtered
// connection (with --allow-net rules, so every check runs): the connection must end
// or answer, never panic or hang, and nothing but a listing, a sign request that
// passed every check, or a verified session-bind may reach the user's agent.
func FuzzConn(f *testing.F) {
	frame := func(msg []byte) []byte { return binary.BigEndian.AppendUint32(nil, uint32(len(msg))) }
	for _, m := range [][]byte{
		{msgRequestIdentities}, {msgRemoveAll}, {msgLock, 0, 0, 0, 1, 'x'},
		signMsg([]byte("key"), []byte("data")),
		appendString([]byte{msgExtension}, []byte(extSessionBind)),
		appendString([]byte{msgExtension}, []byte("query")),
	} {
		f.Add(append(frame(m), m...))
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 0})
	up, fake := startFake(f)
	rules := mustRules(f, "github.com")
	f.Fuzz(func(t *testing.T, in []byte) {
		client, server := net.Pipe()
		s := New(Config{Upstream: up, Rules: rules, KnownHosts: ParseKnownHosts(bytes.NewReader(nil))})
		done := make(chan struct{})
		go func() { defer close(done); (&conn{s: s, c: server, up: &upstreamConn{path: up}}).serve() }()
		go func() { _, _ = io.Copy(io.Discard, client) }()
		go func() {
			_, _ = client.Write(in)
			client.Close()
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("connection did not end")
		}
		for {
			select {
			case b := <-fake.seen:
				if b != msgRequestIdentities {
					t.Fatalf("message %d reached the user's agent", b)
				}
				continue
			default:
			}
			break
		}
	})
}

// FuzzParsers runs the parsers of sandbox-controlled bytes on arbitrary input.
func FuzzParsers(f *testing.F) {
	f.Add([]byte("\x00\x00\x00\x0bssh-ed25519"))
	f.Add([]byte("|1|abc|def ssh-ed25519 AAAA\n@revoked x ssh-rsa AAAA"))
	f.Fuzz(func(t *testing.T, in []byte) {
		_, _ = parseSessionBind(in)
		_, _ = parseUserauth(in)
		_, _ = parseIdentities(in)
		_ = verify(in, in, in)
		kh := ParseKnownHosts(bytes.NewReader(in))
		_ = kh.AllowedHost(in, mustRules(t, "github.com", "127.0.0.1:22"))
	})
}
