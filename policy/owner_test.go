package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckPrivate: a path whose way from / another user could change is refused,
// naming the directory; a sticky directory passes on the way to what is there, not
// where a missing tail is yet to be made (another user can make that name first);
// a symlink is judged by both the directory holding it and where it leads.
func TestCheckPrivate(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mk := func(rel string, mode os.FileMode) string {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mk("own", 0o755)
	mk("own/state", 0o700)
	mk("shared", 0o777)
	mk("shared/state", 0o700)
	mk("sticky", os.ModeSticky|0o777)
	mk("sticky/state", 0o700)
	mk("wide", 0o700)
	mk("wide/state", 0o777)
	if err := os.Symlink(filepath.Join(root, "shared/state"), filepath.Join(root, "own/link")); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "own/config.toml")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(file, 0o666); err != nil {
		t.Fatal(err)
	}
	euid := os.Geteuid()
	for _, c := range []struct {
		path, refused string // refused: the directory named, "" when it passes
	}{
		{"own/state/agentbox", ""},
		{"own/state", ""},
		{"sticky/state/agentbox", ""},
		{"sticky/missing/agentbox", filepath.Join(root, "sticky")},
		{"shared/state/agentbox", filepath.Join(root, "shared")},
		{"shared/missing/deeper", filepath.Join(root, "shared")},
		{"wide/state", "it can be written by every user"},
		{"own/link/agentbox", filepath.Join(root, "shared")},
		{"own/config.toml", "it can be written by every user (mode 0666)"},
	} {
		err := CheckPrivate("state directory", filepath.Join(root, c.path), euid)
		switch {
		case c.refused == "" && err != nil:
			t.Errorf("%s: refused: %v", c.path, err)
		case c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused)):
			t.Errorf("%s: %v; want a refusal naming %s", c.path, err, c.refused)
		}
	}
}
