package compat

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/seccomp"
)

// TestRunPassesFilter checks that bwrap receives the program on SeccompFD, whole, and
// only the descriptors Run means to pass.
func TestRunPassesFilter(t *testing.T) {
	dir := t.TempDir()
	got := filepath.Join(dir, "filter.bin")
	fds := filepath.Join(dir, "fds")
	bin, _ := fakeBwrap(t, dir, v012, `cat <&4 >'`+got+`'
ls -l /proc/$$/fd >'`+fds+`'
printf '{ "child-pid": 1 }\n{ "exit-code": 0 }\n' >&3`)
	// A descriptor inherited without close-on-exec must not reach bwrap. It names a
	// file of its own, at a number above those Run passes on, which would replace it.
	leak, err := os.Create(filepath.Join(dir, "leak"))
	if err != nil {
		t.Fatal(err)
	}
	defer leak.Close()
	if err := unix.Dup3(int(leak.Fd()), 100, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(100)
	// The fake never starts agentbox's init, so Run reports a setup failure; what
	// matters here is what the fake received: the program with the plan's rules.
	for _, confine := range []bool{false, true} {
		plan := testPlan()
		plan.Namespaces.Net, plan.ConfineSockets = confine, confine
		if _, _, err := runFake(t, bin, plan); err == nil || !strings.Contains(err.Error(), "before the command started") {
			t.Fatalf("Run with a fake that never starts the init: %v", err)
		}
		want, _ := seccomp.Program(seccomp.Rules{ConfineSockets: confine})
		if b, err := os.ReadFile(got); err != nil || !bytes.Equal(b, want) {
			t.Errorf("ConfineSockets %v: bwrap read %d bytes on fd 4 (%v), want the %d-byte program", confine, len(b), err, len(want))
		}
	}
	b, _ := os.ReadFile(fds)
	if strings.Contains(string(b), leak.Name()) {
		t.Errorf("the inherited descriptor of %s reached bwrap:\n%s", leak.Name(), b)
	}
}
