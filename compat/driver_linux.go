package compat

import (
	"syscall"

	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/nsinit"
)

// Driver is the bwrap backend as an nsinit.Driver: the command's streams are
// Options.Stdio's, and BeforeExec, AfterStart and Listener are honoured as by
// RunWith. The result names the bubblewrap that ran (Result.BackendVersion).
type Driver struct{}

// Run implements nsinit.Driver.
func (Driver) Run(plan mounts.Plan, opts nsinit.Options) (nsinit.Result, error) {
	res, err := RunWith(plan, Stdio(opts.Stdio), opts)
	phases := make([]nsinit.Phase, len(res.Phases))
	for i, ph := range res.Phases {
		phases[i] = nsinit.Phase{Name: ph.Name, Dur: ph.Dur}
	}
	return nsinit.Result{Status: res.Status, Phases: phases, Signal: syscall.Signal(res.Signal), Left: res.Left,
		Terminal: res.Terminal, BackendVersion: res.Version}, err
}
