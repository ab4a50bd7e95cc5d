package leafcg

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestReadProc: a /proc file is read whole, into the given buffer or past it, as
// os.ReadFile reads it; a missing one is an error naming it.
func TestReadProc(t *testing.T) {
	for _, size := range []int{1, 16, 8 << 10} {
		got, err := readProc("/proc/self/mountinfo", make([]byte, size))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		// Both end with this process's mounts; a test runs in one mount namespace.
		if !bytes.Equal(got, want) {
			t.Errorf("buffer of %d: %d bytes read, os.ReadFile %d", size, len(got), len(want))
		}
	}
	var pe *fs.PathError
	if _, err := readProc("/proc/self/no-such-file", make([]byte, 8)); !errors.As(err, &pe) || !errors.Is(err, fs.ErrNotExist) || pe.Path != "/proc/self/no-such-file" {
		t.Errorf("missing file: %v", err)
	}
}

// TestOwnCgroupAllocations: finding the launcher's cgroup reads both files into a
// buffer on the stack (the mount table of a host with fewer mounts than 8 KiB
// holds), not into buffers grown on the heap read by read.
func TestOwnCgroupAllocations(t *testing.T) {
	if testenv.RaceBuild {
		t.Skip("the race detector allocates beside what it instruments: the count is the plain build's")
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err != nil || len(b) > 8<<10 {
		t.Skipf("mount table of %d bytes (%v): past the stack buffer", len(b), err)
	}
	n := testing.AllocsPerRun(20, func() {
		if _, _, err := ownCgroupAndMount(); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("%v allocations", n)
	if n > 12 {
		t.Errorf("%v allocations, want at most 12", n)
	}
}
