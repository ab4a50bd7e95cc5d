package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestReadUserOpensOnlyFiles: the user's config file may be a link into a dotfiles
// checkout, so links are followed, but one to a FIFO or a device (which a session
// with a kept ~/.config could leave) is refused without what it leads to being
// opened.
func TestReadUserOpensOnlyFiles(t *testing.T) {
	testenv.RefusesLinkedFIFO(t, "config.toml", func(p string) error { _, err := ReadUser(p); return err })
	dir := t.TempDir()
	real, link := filepath.Join(dir, "real.toml"), filepath.Join(dir, "config.toml")
	if err := os.WriteFile(real, []byte("offline = true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if f, err := ReadUser(link); err != nil || f == nil {
		t.Errorf("a link to a real config: %v %v", f, err)
	}
}
