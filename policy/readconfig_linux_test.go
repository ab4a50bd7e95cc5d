package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestReadConfigOpensOnlyFiles: the configs --hide-secrets reads (~/.ssh/config and
// what it includes, kubeconfigs) may be links a session left (a kept ~/.ssh, a
// KUBECONFIG in the repository). A link to a FIFO or a device is refused without
// what it leads to being opened: a watchdog is armed by its open. The FIFO sees no
// open (it did: O_NONBLOCK kept the open from waiting, not from happening).
func TestReadConfigOpensOnlyFiles(t *testing.T) {
	dir := t.TempDir()
	fifo, link := filepath.Join(dir, "fifo"), filepath.Join(dir, "config")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	var err error
	if testenv.Opened(t, fifo, func() { _, err = readConfig(link) }) {
		t.Error("readConfig opened the FIFO a link led to")
	}
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a link to a FIFO: %v, want not a regular file", err)
	}
}
