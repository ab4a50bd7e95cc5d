package session

import (
	"fmt"
	"io"
	"time"

	"github.com/agentbox/agentbox/backend"
)

// Host-side timing names. The launcher's own steps are prefixed with HostPhasePrefix
// so that a reader (agentbox bench) can tell them from the backend's setup phases;
// PhaseSession spans all of Run.
//
// The steps the command waits for but the sandbox does not (the audit's baseline, the
// record's start, the snapshot) start once the plan is rechecked and run beside the
// launcher's last steps and the sandbox's setup (prelaunch.go); the backend waits for
// them (backend.Options.BeforeExec). Their names have DuringSetupPrefix; the part of
// them the init waited for is its nsinit.PhaseGate phase.
const (
	HostPhasePrefix   = "host: "
	DuringSetupPrefix = "host, during setup: "
	PhaseSession      = "session"
)

// host names one of the launcher's own steps.
func host(step string) string { return HostPhasePrefix + step }

// printPhases writes the timings to w (AGENTBOX_TIMINGS=1), one per line: the whole
// session, the host steps, then the backend's phases.
func printPhases(w io.Writer, total time.Duration, phases []backend.Phase) {
	fmt.Fprintf(w, "agentbox: timings: %-28s %s\n", PhaseSession, total.Round(time.Microsecond))
	for _, ph := range phases {
		fmt.Fprintf(w, "agentbox: timings: %-28s %s\n", ph.Name, ph.Dur.Round(time.Microsecond))
	}
}
