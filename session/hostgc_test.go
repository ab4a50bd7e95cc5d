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
	g.commandStarted()
	if gcPercent() != -1 {
		t.Fatal("on as soon as the command started")
	}
	time.Sleep(resumeAfter + 300*time.Millisecond)
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
