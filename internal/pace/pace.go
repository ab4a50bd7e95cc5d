// Package pace bounds how fast the launcher takes connections from a sandbox.
// The launcher serves the sandbox's sockets (the checkpoint endpoint, the SSH
// agent filter) from outside the session's cgroup, and each connection costs it
// more than connect(2) costs the sandbox: left unpaced, a connect loop inside
// makes the host spend a multiple of the session's --cpus. A Listener with a
// short backlog and a Gate before each accept keep that work to a fixed rate;
// past the backlog, a connect inside waits, or gets EAGAIN when non-blocking.
//
// It is not for accepting on sockets whose connections are the session's traffic
// (the network proxy, port forwarding): there every connection is wanted. The
// proxy paces only the connections that end without carrying any (refused,
// failed, malformed: netproxy's endGate).
package pace

import (
	"sync"
	"time"
)

// Gate lets through one caller per gap on average, with bursts of up to burst
// (a token bucket, kept as the time the next token is due).
type Gate struct {
	gap   time.Duration
	burst int
	mu    sync.Mutex
	due   time.Time
}

// NewGate returns a gate of one per gap, bursts of burst (at least 1).
func NewGate(gap time.Duration, burst int) *Gate {
	return &Gate{gap: gap, burst: max(burst, 1)}
}

// Wait returns when the caller's turn has come.
func (g *Gate) Wait() {
	if wait := g.reserve(); wait > 0 {
		time.Sleep(wait)
	}
}

// WaitOr is Wait that gives up when stop is closed first: false then. The turn
// stays taken.
func (g *Gate) WaitOr(stop <-chan struct{}) bool {
	wait := g.reserve()
	if wait <= 0 {
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	}
}

// reserve takes the next turn and returns how long until it comes.
func (g *Gate) reserve() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	// Tokens saved while idle are capped at burst.
	if floor := now.Add(-g.gap * time.Duration(g.burst-1)); g.due.Before(floor) {
		g.due = floor
	}
	wait := g.due.Sub(now)
	g.due = g.due.Add(g.gap)
	return wait
}
