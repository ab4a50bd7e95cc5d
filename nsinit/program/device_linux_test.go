package program

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/mounts"
)

func newTestProgram(t *testing.T) *Program {
	t.Helper()
	fds, err := OpenFds()
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(0, 1<<16, 0, fds, KernelFeatures())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(p.Mem) })
	return p
}

// TestCompileRefusesDeviceWithoutIdentity: a device operation with no identity
// (mounts.Op.SourceID) would bind whatever is at its path at launch; the compiler
// refuses the plan, whoever runs it (the native backend, or the init under bwrap).
func TestCompileRefusesDeviceWithoutIdentity(t *testing.T) {
	plan := mounts.Plan{
		Ops:     []mounts.Op{{Kind: mounts.Device, Source: "/dev/zero", Dest: "/dev/zero"}},
		Workdir: "/", Command: []string{"/bin/true"},
	}
	for _, nested := range []bool{false, true} {
		err := newTestProgram(t).Compile(plan, Options{Nested: nested})
		if err == nil || !strings.Contains(err.Error(), "/dev/zero") || !strings.Contains(err.Error(), "no identity") {
			t.Errorf("nested %v: %v, want the plan refused naming the device", nested, err)
		}
	}
}
