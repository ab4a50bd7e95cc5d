package compat

import (
	"github.com/agentbox/agentbox/backend"
	"github.com/agentbox/agentbox/mounts"
)

// Driver is the bwrap backend as a backend.Driver: the command's streams are
// Options.Stdio's, and Env, BeforeExec, AfterStart, Cgroup and Listener are honoured as by
// RunWith. The result names the bubblewrap that ran (Result.BackendVersion).
type Driver struct{}

// Run implements backend.Driver.
func (Driver) Run(plan mounts.Plan, opts backend.Options) (backend.Result, error) {
	return RunWith(plan, opts)
}
