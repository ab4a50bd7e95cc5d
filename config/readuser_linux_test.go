package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestReadUserOpensOnlyFiles: the user's config file may be a link into a dotfiles
// checkout, so links are followed, but one to a FIFO or a device (which a session
// with a kept ~/.config could leave) is refused without what it leads to being
// opened: the FIFO sees no open.
func TestReadUserOpensOnlyFiles(t *testing.T) {
	dir := t.TempDir()
	fifo, link := filepath.Join(dir, "fifo"), filepath.Join(dir, "config.toml")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	var err error
	if testenv.Opened(t, fifo, func() { _, err = ReadUser(link) }) {
		t.Error("ReadUser opened the FIFO a link led to")
	}
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a link to a FIFO: %v, want not a regular file", err)
	}
	real := filepath.Join(dir, "real.toml")
	if err := os.WriteFile(real, []byte("offline = true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if f, err := ReadUser(link); err != nil || f == nil {
		t.Errorf("a link to a real config: %v %v", f, err)
	}
}
