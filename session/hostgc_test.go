package session

import (
	"runtime/debug"
	"testing"
	"time"
)

// gcPercent reads the collector's setting (SetGCPercent has no query of its own).
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// TestHostGC: the collector is off for the host work, bounded by the memory
// limit, on again once the command has run resumeAfter, off again when it ends,
// and as it was after the session.
func TestHostGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(73))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(5 << 30))
	var g hostGC
	g.pause()
	g.pause()
	if p, l := gcPercent(), debug.SetMemoryLimit(-1); p != -1 || l != hostWorkMemoryLimit {
		t.Fatalf("paused: GOGC %d, limit %d; want off, %d", p, l, hostWorkMemoryLimit)
	}
	started := time.Now()
	g.commandStarted()
	if gcPercent() != -1 {
		t.Fatal("on as soon as the command started")
	}
	// The timer's resume runs late on a loaded machine: wait for it, bounded
	// against a hang; it must not have come before resumeAfter.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		g.mu.Lock()
		paused := g.paused
		g.mu.Unlock()
		if !paused {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("still off a minute after the command started")
		}
	}
	if since := time.Since(started); since < resumeAfter {
		t.Fatalf("on again %s after the command started, before resumeAfter (%s)", since, resumeAfter)
	}
	if p, l := gcPercent(), debug.SetMemoryLimit(-1); p != 73 || l != 5<<30 {
		t.Fatalf("command running for %s: GOGC %d, limit %d; want 73, %d", resumeAfter, p, l, 5<<30)
	}
	g.commandEnded()
	if gcPercent() != -1 {
		t.Fatal("on after the command ended")
	}
	g.resume()
	g.resume()
	if p, l := gcPercent(), debug.SetMemoryLimit(-1); p != 73 || l != 5<<30 {
		t.Fatalf("after the session: GOGC %d, limit %d", p, l)
	}
	// A command that ends within resumeAfter never turns it on.
	g.pause()
	g.commandStarted()
	g.commandEnded()
	time.Sleep(resumeAfter + 300*time.Millisecond)
	if gcPercent() != -1 {
		t.Fatal("a short command's timer turned the collector on after it ended")
	}
	g.resume()
}

// TestHostGCEndedAsTheTimerFires: a command that ends just as resumeAfter runs
// out leaves the collector off for the work after it. The timer's resume, started
// before commandEnded stopped the timer but run after commandEnded paused again,
// turned it back on (about one time in three here, with the two at the same
// moment), for the end scan and the record.
func TestHostGCEndedAsTheTimerFires(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	for i := range 400 {
		var g hostGC
		g.pause()
		g.commandStarted()
		// The command has run resumeAfter, give or take a few µs, as it ends.
		d := time.Duration(i%40) * time.Microsecond
		g.mu.Lock()
		g.timer.Reset(d)
		g.mu.Unlock()
		time.Sleep(d)
		g.commandEnded()
		time.Sleep(500 * time.Microsecond) // a resume the timer started has run by now
		g.mu.Lock()
		held := g.paused // after any resume the timer started
		g.mu.Unlock()
		if p := gcPercent(); p != -1 || !held {
			g.resume()
			t.Fatalf("iteration %d: the collector is on (GOGC %d) after the command ended", i, p)
		}
		g.resume()
	}
}

// TestHostGCNested: two sessions' holds in one process: the collector stays off
// until both let go, in either order, and is then as it was.
func TestHostGCNested(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(73))
	var a, b hostGC
	a.pause()
	b.pause()
	a.resume()
	if gcPercent() != -1 {
		t.Fatal("on while the second session holds it off")
	}
	a.pause()
	b.resume()
	if gcPercent() != -1 {
		t.Fatal("on while the first session holds it off again")
	}
	a.resume()
	if p := gcPercent(); p != 73 {
		t.Fatalf("after both: GOGC %d, want 73", p)
	}
}
