package session

import (
	"fmt"
	"io"
	"time"

	"github.com/agentbox/agentbox/nsinit"
)

// Host-side timing names. The launcher's own steps are prefixed with HostPhasePrefix
// so that a reader (agentbox bench) can tell them from the backend's setup phases;
// PhaseSession spans all of Run.
//
// The steps the command waits for but the sandbox does not (the audit's baseline, the
// snapshot) run while the backend builds the sandbox (nsinit.Options.BeforeExec):
// their names have DuringSetupPrefix, and they are part of the backend's total-setup
// when its init waited for them (the nsinit.PhaseGate phase), before it otherwise.
const (
	HostPhasePrefix   = "host: "
	DuringSetupPrefix = "host, during setup: "
	PhaseSession      = "session"
)

// host names one of the launcher's own steps.
func host(step string) string { return HostPhasePrefix + step }

// printPhases writes the timings to w (AGENTBOX_TIMINGS=1), one per line: the whole
// session, the host steps, then the backend's phases.
func printPhases(w io.Writer, total time.Duration, phases []nsinit.Phase) {
	fmt.Fprintf(w, "agentbox: timings: %-28s %s\n", PhaseSession, total.Round(time.Microsecond))
	for _, ph := range phases {
		fmt.Fprintf(w, "agentbox: timings: %-28s %s\n", ph.Name, ph.Dur.Round(time.Microsecond))
	}
}
