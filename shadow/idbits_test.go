package shadow

import (
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestIDBitsTouchNoFreshMemory: a session id's random bits cost the launcher no
// page fault. In a fresh process (this test re-run), the thread that takes them
// faults in no page doing so; the vDSO's getrandom (unix.Getrandom) maps and
// touches a random state for the thread on its first call.
func TestIDBitsTouchNoFreshMemory(t *testing.T) {
	if os.Getenv("AGENTBOX_TEST_IDBITS") == "1" {
		runtime.LockOSThread()
		var b [3]byte
		var before, after unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_THREAD, &before)
		idBits(b[:])
		_ = unix.Getrusage(unix.RUSAGE_THREAD, &after)
		os.Stdout.WriteString("faults " + strconv.FormatInt(after.Minflt-before.Minflt, 10) + "\n")
		return
	}
	// Several fresh processes: a fault another thread's work causes is not this
	// thread's, but a count of zero must hold in each.
	for range 5 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestIDBitsTouchNoFreshMemory$", "-test.count=1")
		cmd.Env = append(os.Environ(), "AGENTBOX_TEST_IDBITS=1")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("helper: %v %s", err, out)
		}
		i := bytes.Index(out, []byte("faults "))
		if i < 0 {
			t.Fatalf("helper said %q", out)
		}
		n := strings.TrimSpace(strings.SplitN(string(out[i+len("faults "):]), "\n", 2)[0])
		if n != "0" {
			t.Fatalf("taking an id's random bits faulted in %s pages, want none", n)
		}
	}
}

// TestIDBitsRandom: the bits come from the kernel: 64 ids' bits are not all one
// value (a failure would leave zeros).
func TestIDBitsRandom(t *testing.T) {
	seen := map[[3]byte]bool{}
	for range 64 {
		var b [3]byte
		idBits(b[:])
		seen[b] = true
	}
	if len(seen) < 60 {
		t.Fatalf("64 draws of 24 bits gave %d distinct values", len(seen))
	}
}
