package sandbox

import (
	"maps"
	"os"
	"slices"
	"sync"

	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/nsinit"
)

// Prestart makes Run keep one init started ahead of the next launch: cloned into
// fresh namespaces, its runtime up, waiting for a plan. The next Run then skips the
// clone and the init's start-up (about half of a launch), and starts the following
// spare in the background when it returns. Only opts.Offline and opts.InitBinary
// matter here, as they are fixed when a spare starts; a Run with other values, or
// after the host's mount table changed, or by another uid, gets a fresh init as
// without Prestart, and the spare is discarded.
//
// The cost is one idle process (and its namespaces) while Prestart is on; it dies
// with the program. StopPrestart ends it.
func Prestart(opts Options) error {
	if opts.InitBinary == "" && !initCalled.Load() {
		return ErrNoInit
	}
	spares.Lock()
	defer spares.Unlock()
	file, err := openInitBinary(opts.InitBinary, grantedDirs()...)
	if err != nil {
		return err
	}
	spares.on, spares.net, spares.binary = true, opts.Offline, opts.InitBinary
	if spares.next == nil {
		spares.next = startSpare(opts.Offline, opts.InitBinary, file)
	} else if file != nil {
		file.Close()
	}
	return nil
}

// StopPrestart ends Prestart and discards the waiting spare.
func StopPrestart() {
	spares.Lock()
	pending := spares.next
	spares.on, spares.next = false, nil
	spares.Unlock()
	if pending != nil {
		<-pending.done
		pending.p.Discard()
	}
}

// spares is Prestart's state: at most one spare, starting or waiting.
var spares struct {
	sync.Mutex
	on     bool
	net    bool
	binary string
	next   *pendingSpare
	// granted are the writable directories of every session Run started in this
	// process, running or ended: each could have replaced the spares' binary.
	granted map[string]bool
}

// grantedDirs lists spares.granted; the caller holds spares.
func grantedDirs() []string { return slices.Collect(maps.Keys(spares.granted)) }

// grantedToSessions adds a session's writable directories to spares.granted.
func grantedToSessions(dirs []string) {
	spares.Lock()
	defer spares.Unlock()
	if spares.granted == nil {
		spares.granted = map[string]bool{}
	}
	for _, d := range dirs {
		spares.granted[d] = true
	}
}

type pendingSpare struct {
	done chan struct{}
	p    *nsinit.Prestarted // nil when it failed to start
}

// startSpare starts a spare from binary, open at file (nil for ""), which it closes.
func startSpare(net bool, binary string, file *os.File) *pendingSpare {
	ps := &pendingSpare{done: make(chan struct{})}
	go func() {
		defer close(ps.done)
		if file != nil {
			defer file.Close()
		}
		ps.p, _ = nsinit.Prestart(net, binary, file) // a failure shows in the fresh launch
	}()
	return ps
}

// takeSpare returns the waiting spare when plan can use it; otherwise it discards
// it and returns nil.
func takeSpare(plan mounts.Plan, binary string) *nsinit.Prestarted {
	spares.Lock()
	pending := spares.next
	spares.next = nil
	spares.Unlock()
	if pending == nil {
		return nil
	}
	<-pending.done
	if !pending.p.Usable(plan, binary) {
		pending.p.Discard()
		return nil
	}
	return pending.p
}

// refillSpare starts the next spare after a launch, when Prestart is on.
func refillSpare() {
	spares.Lock()
	defer spares.Unlock()
	// The binary is looked at again: a spare runs it before any plan, and its
	// path may lead elsewhere by now, or lie where a session of this process
	// could write (Prestart checked it before any; a Run with another InitBinary
	// does not check this one).
	if !spares.on || spares.next != nil {
		return
	}
	if file, err := openInitBinary(spares.binary, grantedDirs()...); err == nil {
		spares.next = startSpare(spares.net, spares.binary, file)
	}
}
