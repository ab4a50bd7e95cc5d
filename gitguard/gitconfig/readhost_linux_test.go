package gitconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestReadHostFileOpensOnlyFiles: a config file Git would read (an include that
// resolves into the repository, a linked worktree's config) is read through
// symlinks, as Git does; one whose link leads to a FIFO or a device is refused
// without what it leads to being opened (a watchdog is armed by its open): the
// FIFO sees no open. A link to a real config is read.
func TestReadHostFileOpensOnlyFiles(t *testing.T) {
	dir := t.TempDir()
	fifo, link := filepath.Join(dir, "fifo"), filepath.Join(dir, "config")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	var err error
	if testenv.Opened(t, fifo, func() { _, err = ReadHostFile(link) }) {
		t.Error("ReadHostFile opened the FIFO a link led to")
	}
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a link to a FIFO: %v, want not a regular file", err)
	}
	real := filepath.Join(dir, "real")
	if err := os.WriteFile(real, []byte("[core]\n\tbare = false\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if entries, err := ReadHostFile(link); err != nil || len(entries) != 1 {
		t.Errorf("a link to a real config: %v %v", entries, err)
	}
}
