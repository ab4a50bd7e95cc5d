package gitconfig

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestReadHostFileOpensOnlyFiles: a config file Git would read (an include that
// resolves into the repository, a linked worktree's config) is read through
// symlinks, as Git does; one whose link leads to a FIFO or a device is refused
// without what it leads to being opened. A link to a real config is read.
func TestReadHostFileOpensOnlyFiles(t *testing.T) {
	testenv.RefusesLinkedFIFO(t, "config", func(p string) error { _, err := ReadHostFile(p); return err })
	dir := t.TempDir()
	real, link := filepath.Join(dir, "real"), filepath.Join(dir, "config")
	if err := os.WriteFile(real, []byte("[core]\n\tbare = false\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if entries, err := ReadHostFile(link); err != nil || len(entries) != 1 {
		t.Errorf("a link to a real config: %v %v", entries, err)
	}
}
