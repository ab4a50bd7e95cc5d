package program

import (
	"errors"
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

func statID(t *testing.T, path string) mounts.FileID {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return mounts.FileID{Dev: st.Dev, Ino: st.Ino}
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

// TestNestedChecksBoundDevices: under bwrap, which binds a device by the path its
// descriptor leads to, the init compares what is bound at each device's path with
// the identity the launcher verified before anything else runs: another node there
// fails the launch with ErrSourceChanged, the one verified passes.
func TestNestedChecksBoundDevices(t *testing.T) {
	for _, c := range []struct {
		id   mounts.FileID
		want error
	}{
		{statID(t, "/dev/zero"), nil},
		{statID(t, "/dev/null"), ErrSourceChanged},
	} {
		p := newTestProgram(t)
		plan := mounts.Plan{
			Ops:     []mounts.Op{{Kind: mounts.Device, Source: "/dev/zero", Dest: "/dev/zero", SourceID: c.id}},
			Workdir: "/", Command: []string{"/bin/true"},
		}
		if err := p.Compile(plan, Options{Nested: true}); err != nil {
			t.Fatal(err)
		}
		_, step, err := p.RunUntil(0, p.NetDone, nil)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("bound /dev/zero checked against %+v: %s: %v, want %v", c.id, step, err, c.want)
		}
		for fd := range p.opened {
			unix.Close(fd)
		}
	}
}
