//go:build linux && !amd64

package nsinit

import (
	"os"

	"github.com/agentbox/agentbox/mounts"
)

// runRaw: the raw init's clone stub is amd64-only (rawinit_linux_amd64.s); here the
// re-executed init always runs.
func runRaw(mounts.Plan, Options) (Result, error, bool) { return Result{}, nil, false }

// PrestartRaw: no raw init here (see runRaw).
func PrestartRaw(bool, Stdio) *Prestarted { return nil }

func runPrestartedRaw(p *Prestarted, plan mounts.Plan, opts Options) (Result, error) {
	p.proc.kill()
	p.proc.wait()
	return Run(plan, opts)
}

// rawProgram: never made here (Prestarted.raw stays nil).
type rawProgram struct{}

// rawControl: no raw init's connection here.
func rawControl(initConn) *os.File { return nil }
