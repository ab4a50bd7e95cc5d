package prepare

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/policy"
)

// A push-guard staging directory that cannot be removed is named on the session's
// warning output (Options.Stderr: the Go API's Log), not on the process's stderr.
func TestPushGuardCleanupWarnsOnTheSessionsOutput(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root: a mount inside the staging directory is what makes its removal fail")
	}
	var warn bytes.Buffer
	g, err := preparePushGuard(Options{Stderr: &warn}, &policy.Policy{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if g.staged == nil {
		t.Fatal("no staging directory: is git on PATH?")
	}
	busy := filepath.Join(g.staged.Dir, "busy")
	if err := os.Mkdir(busy, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("none", busy, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		unix.Unmount(busy, unix.MNT_DETACH)
		os.RemoveAll(g.staged.Dir)
	}()
	g.cleanup()
	if got := warn.String(); !strings.Contains(got, "agentbox: push guard: remove "+g.staged.Dir) {
		t.Fatalf("warning output %q, want the staging directory named", got)
	}
}
