package session

import (
	"fmt"
	"io"
	"time"

	"github.com/agentbox/agentbox/nsinit"
)

// Host-side timing names. The launcher's own steps are prefixed with hostPhasePrefix
// so that a reader (agentbox bench) can tell them from the backend's setup phases;
// phaseSession spans all of Run.
const (
	hostPhasePrefix = "host: "
	phaseSession    = "session"
)

// stopwatch records consecutive host-side steps of one session.
type stopwatch struct {
	start, last time.Time
	phases      []nsinit.Phase
}

func newStopwatch() *stopwatch {
	now := time.Now()
	return &stopwatch{start: now, last: now}
}

// lap ends the step that ran since the previous lap and names it.
func (w *stopwatch) lap(step string) {
	now := time.Now()
	w.phases = append(w.phases, nsinit.Phase{Name: hostPhasePrefix + step, Dur: now.Sub(w.last)})
	w.last = now
}

// skip starts a new step without recording the time since the last one (the
// backend, whose own phases are recorded separately).
func (w *stopwatch) skip() { w.last = time.Now() }

// printPhases writes the timings to w (AGENTBOX_TIMINGS=1), one per line: the whole
// session, the host steps, then the backend's phases.
func printPhases(w io.Writer, total time.Duration, phases []nsinit.Phase) {
	fmt.Fprintf(w, "agentbox: timings: %-28s %s\n", phaseSession, total.Round(time.Microsecond))
	for _, ph := range phases {
		fmt.Fprintf(w, "agentbox: timings: %-28s %s\n", ph.Name, ph.Dur.Round(time.Microsecond))
	}
}
