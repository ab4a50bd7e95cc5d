package session

import (
	"runtime/debug"
	"sync"
	"time"
)

// The garbage collector during the host-side work. A session's host work — the
// audit's walks, the record's staging — allocates a tree's worth of entries in a
// short time and keeps most of them, so at the default GOGC=100 the collector runs
// repeatedly during a big tree's walk and charges its mark assists to the walk's own
// goroutines, for garbage there is little of. So the collector is off while that work
// runs (before the command, and after it), bounded by hostWorkMemoryLimit, past which
// the runtime collects anyway; once the command has run a second — it may run for
// hours, with the network proxy's buffers coming and going — it is as the runtime,
// GOGC and GOMEMLIMIT would have it, until the command ends.

// hostWorkMemoryLimit bounds the heap while the collector is off: far above what a
// walk of the entry bound's tree holds, far below what would hurt a workstation.
const hostWorkMemoryLimit = 1 << 30

// hostGC turns the collector off for one session's host work and on again for its
// command. Sessions in one process (none today but tests) share the setting: it is
// off while any of them holds it (heldOff), and back as it was when the last lets go.
type hostGC struct {
	mu     sync.Mutex
	paused bool        // this session holds the collector off
	timer  *time.Timer // commandStarted's
}

// heldOff is the process's collector setting under the sessions' holds.
var heldOff struct {
	mu      sync.Mutex
	holders int
	percent int   // GOGC before the first hold
	limit   int64 // the memory limit before the first hold
}

// pause turns the collector off (until resume). Pausing twice is harmless.
func (g *hostGC) pause() {
	if g == nil {
		return // the Go API's session: the caller's settings stand
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pauseLocked()
}

func (g *hostGC) pauseLocked() {
	if g.paused {
		return
	}
	heldOff.mu.Lock()
	defer heldOff.mu.Unlock()
	if heldOff.holders == 0 {
		heldOff.percent = debug.SetGCPercent(-1)
		heldOff.limit = debug.SetMemoryLimit(min(hostWorkMemoryLimit, debug.SetMemoryLimit(-1)))
	}
	heldOff.holders++
	g.paused = true
}

// resume lets go of the hold; the last one gives back the settings the first found.
// Resuming when not paused is harmless.
func (g *hostGC) resume() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.resumeLocked()
}

func (g *hostGC) resumeLocked() {
	if !g.paused {
		return
	}
	heldOff.mu.Lock()
	defer heldOff.mu.Unlock()
	if heldOff.holders--; heldOff.holders == 0 {
		debug.SetMemoryLimit(heldOff.limit)
		debug.SetGCPercent(heldOff.percent)
	}
	g.paused = false
}

// resumeAfter is how long the command runs before the collector is on again: a
// command of a tool call is usually over by then, and a collection started as it
// ends would only compete with the end scan for the cores.
const resumeAfter = time.Second

// commandStarted arranges for resume once the command has run resumeAfter.
func (g *hostGC) commandStarted() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.timer == nil {
		var t *time.Timer
		t = time.AfterFunc(resumeAfter, func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			// A timer that fired as the command ended, its resume started
			// but not yet here when commandEnded stopped it and paused
			// again: not this timer's to undo.
			if g.timer == t {
				g.resumeLocked()
			}
		})
		g.timer = t
	}
}

// commandEnded cancels what commandStarted arranged, and pauses again for the work
// after the command.
func (g *hostGC) commandEnded() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.timer != nil {
		g.timer.Stop()
		g.timer = nil
	}
	g.pauseLocked()
}
