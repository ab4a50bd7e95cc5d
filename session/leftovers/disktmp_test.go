package leftovers

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// A --disk-tmp directory that cannot be removed is named on the session's warning
// output (the Go API's Log), terminal-safe, and not on the process's stderr.
func TestDiskTmpWarnsOnTheSessionsOutput(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root: a mount inside the directory is what makes its removal fail")
	}
	var warn bytes.Buffer
	dir, release, err := MakeDiskTmp(t.TempDir(), &warn)
	if err != nil {
		t.Fatal(err)
	}
	// A name the sandbox chose, with a terminal escape in it.
	busy := filepath.Join(dir, "m\x1b]0;owned\x07")
	if err := os.Mkdir(busy, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("none", busy, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		unix.Unmount(busy, unix.MNT_DETACH)
		os.RemoveAll(dir)
		os.Remove(dir + lockSuffix)
	}()
	release()
	got := warn.String()
	if !strings.Contains(got, "agentbox: --disk-tmp: ") || !strings.Contains(got, "agentbox gc retries") {
		t.Fatalf("warning output %q, want the directory left named", got)
	}
	if strings.ContainsAny(got, "\x1b\x07") {
		t.Errorf("warning %q carries the name's control characters raw", got)
	}
}
