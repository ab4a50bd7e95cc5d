package portsvc

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/shadow"
)

// The kinds of forwarding, as the record names them.
const (
	KindHostPort = "host-port"
	KindPublish  = "publish"
)

// MaxConns bounds the connections one forwarding relays at a time: a client that
// opens more has the extra ones closed at once (counted as refused), so that a
// flood costs the launcher a bounded number of descriptors and goroutines.
const MaxConns = 128

// dialTimeout bounds the connection to the far end of a relay.
const dialTimeout = 5 * time.Second

// forward is one forwarding: the connections accepted on l are relayed to what
// dial connects to.
type forward struct {
	kind string
	m    policy.PortMap
	dial func() (net.Conn, error)
	slot chan struct{} // one per connection being relayed (MaxConns)

	mu      sync.Mutex
	ls      []net.Listener
	conns   map[net.Conn]struct{}
	stopped bool
	wg      sync.WaitGroup

	relayed, refused, failed atomic.Int64
}

func newForward(kind string, m policy.PortMap, dial func() (net.Conn, error)) *forward {
	return &forward{kind: kind, m: m, dial: dial, slot: make(chan struct{}, MaxConns), conns: map[net.Conn]struct{}{}}
}

// serve accepts on l in a goroutine of its own until stop: a --host-port on the
// init's one listener, a --publish on the host's loopback listeners (two at most).
func (f *forward) serve(l net.Listener) {
	f.mu.Lock()
	defer f.mu.Unlock()
	most := 1
	if f.kind == KindPublish {
		most = 2
	}
	if f.stopped || len(f.ls) >= most {
		l.Close()
		return
	}
	f.ls = append(f.ls, l)
	f.wg.Add(1)
	go f.accept(l)
}

func (f *forward) accept(l net.Listener) {
	defer f.wg.Done()
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors, say: the backlog keeps the rest waiting.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		select {
		case f.slot <- struct{}{}:
		default:
			f.refused.Add(1)
			c.Close()
			continue
		}
		if !f.track(c) {
			<-f.slot
			c.Close()
			return
		}
		f.wg.Add(1)
		go f.handle(c)
	}
}

// handle relays c to a new connection to the far end, then closes both.
func (f *forward) handle(c net.Conn) {
	defer f.wg.Done()
	defer func() { <-f.slot }()
	defer f.untrack(c)
	up, err := f.dial()
	if err != nil {
		f.failed.Add(1)
		return
	}
	if !f.track(up) {
		up.Close()
		return
	}
	defer f.untrack(up)
	f.relayed.Add(1)
	relay(c, up)
}

// relay copies both ways until both have ended. An end of data is passed on as a
// half close, so that a request-then-response protocol sees the request end; an
// error on either side ends both.
func relay(a, b net.Conn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		pipe(b, a)
	}()
	pipe(a, b)
	<-done
}

// pipe copies from src to dst; at src's end it half-closes dst, on an error it
// closes both, which ends the other direction too.
func pipe(dst, src net.Conn) {
	_, err := io.Copy(dst, src)
	if err == nil {
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			return
		}
	}
	dst.Close()
	src.Close()
}

func (f *forward) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *forward) untrack(c net.Conn) {
	c.Close()
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
}

// stop closes the listener and every connection, and waits for the relays.
func (f *forward) stop() {
	f.mu.Lock()
	f.stopped = true
	for _, l := range f.ls {
		l.Close()
	}
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

func (f *forward) report() shadow.PortForward {
	return shadow.PortForward{Kind: f.kind, Inside: f.m.Inside, Host: f.m.Host,
		Connections: int(f.relayed.Load()), Refused: int(f.refused.Load()), Failed: int(f.failed.Load())}
}
