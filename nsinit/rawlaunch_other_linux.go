//go:build linux && (!amd64 || race)

package nsinit

import (
	"os"

	"github.com/agentbox/agentbox/mounts"
)

// The raw init's clone stub is amd64-only (rawinit_linux_amd64.s), and a -race build
// leaves it out: the child of its CLONE_VM clone runs Go code that must call nothing
// of the runtime, and the race detector's instrumentation does (the compiler's ABI
// wrapper around rawInitMain calls racefuncenter, which faults in the child, whose
// stack and TLS are not a goroutine's). Here the re-executed Go init always runs.

// RawInitAvailable reports whether launches here can run the raw init: never.
func RawInitAvailable() bool { return rawUsable() }

// rawUsable: no raw init here, whatever the kernel has.
func rawUsable() bool { return false }

// runRaw: no raw init here; the caller starts the Go init.
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
