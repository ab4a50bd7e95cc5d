package gitguard

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestPointerFileOpensOnlyFiles: Git's pointer files (.git as a file, commondir,
// gitdir) are repository files the sandbox writes, read by the launcher through
// symlinks as Git does. A link to a FIFO or a device is refused without what it
// leads to being opened (a watchdog is armed by its open): the FIFO sees no open.
func TestPointerFileOpensOnlyFiles(t *testing.T) {
	dir := t.TempDir()
	fifo, link := filepath.Join(dir, "fifo"), filepath.Join(dir, "commondir")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	var err error
	if testenv.Opened(t, fifo, func() { _, err = readSmall(link) }) {
		t.Error("readSmall opened the FIFO a link led to")
	}
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a link to a FIFO: %v, want not a regular file", err)
	}
}
