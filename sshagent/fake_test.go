package sshagent

import (
	"crypto/ed25519"
	"net"
	"path/filepath"
	"testing"
)

// fakeAgent is a stand-in for the user's agent in fuzzing and unit tests: it lists
// two keys, signs anything, and counts the requests that reached it.
type fakeAgent struct {
	ids  []Identity
	seen chan byte
}

func edBlob(pub ed25519.PublicKey) []byte {
	return appendString(appendString(nil, []byte("ssh-ed25519")), pub)
}

func startFake(t testing.TB) (string, *fakeAgent) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "agent")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	f := &fakeAgent{seen: make(chan byte, 1<<16)}
	for i, c := range []string{"one", "two"} {
		seed := make([]byte, 32)
		seed[0] = byte(i + 1)
		f.ids = append(f.ids, Identity{Blob: edBlob(ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)), Comment: c})
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go f.serve(c)
		}
	}()
	return path, f
}

func (f *fakeAgent) serve(c net.Conn) {
	defer c.Close()
	for {
		msg, err := readMessage(c)
		if err != nil {
			return
		}
		select {
		case f.seen <- msg[0]:
		default:
		}
		var reply []byte
		switch msg[0] {
		case msgRequestIdentities:
			reply = marshalIdentities(f.ids)
		case msgSignRequest:
			reply = appendString([]byte{msgSignResponse}, []byte("signature"))
		default:
			reply = []byte{msgSuccess} // a careless agent: the filter must not rely on it
		}
		if writeMessage(c, reply) != nil {
			return
		}
	}
}

// serveFilter starts a Server for cfg on a fresh socket and returns its path.
func serveFilter(t testing.TB, cfg Config) (string, *Server) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "filtered")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := New(cfg)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(l) }()
	t.Cleanup(func() { s.Close(); <-done })
	return path, s
}

// ask sends one message to the agent at path and returns its answer.
func ask(t testing.TB, path string, msg []byte) []byte {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := writeMessage(c, msg); err != nil {
		t.Fatal(err)
	}
	reply, err := readMessage(c)
	if err != nil {
		t.Fatal(err)
	}
	return reply
}
