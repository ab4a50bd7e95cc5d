package compat

import (
	"bytes"
	"fmt"
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
ls /proc/$$/fd >'`+fds+`'
printf '{ "child-pid": 1 }\n{ "exit-code": 0 }\n' >&3`)
	// A descriptor inherited without close-on-exec must not reach bwrap.
	leak, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer leak.Close()
	if _, err := unix.FcntlInt(leak.Fd(), unix.F_SETFD, 0); err != nil {
		t.Fatal(err)
	}
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
	// The fake's shell holds 0-2, 3, 4, 5 and whatever ls itself opens (its /proc dir).
	b, _ := os.ReadFile(fds)
	for _, fd := range strings.Fields(string(b)) {
		if fd == fmt.Sprint(leak.Fd()) {
			t.Errorf("inherited fd %s reached bwrap (fds %q)", fd, b)
		}
	}
}
