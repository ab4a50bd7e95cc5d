package audit

import (
	"os"
	"path/filepath"
	"testing"
)

// TestFixConfigThroughSwappedParent: between the scan and the fix, a second
// session's sandbox replaces a directory on the way to a flagged config with a
// symlink to a directory of the user's. The fix edits nothing there: it is refused.
func TestFixConfigThroughSwappedParent(t *testing.T) {
	dir := t.TempDir()
	gitDir := filepath.Join(dir, "repo", ".git")
	outside := filepath.Join(dir, "outside")
	for _, d := range []string{gitDir, outside} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	const planted = "[core]\n\tfsmonitor = evil\n"
	const users = "[core]\n\tfsmonitor = mine\n[user]\n\tname = me\n"
	if err := os.WriteFile(filepath.Join(gitDir, "config"), []byte(planted), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "config"), []byte(users), 0o600); err != nil {
		t.Fatal(err)
	}
	f := Finding{Kind: KindConfig, Path: filepath.Join(gitDir, "config"), Reasons: []string{`core.fsmonitor = "mine" (runs a program)`},
		place: place{roots: []string{filepath.Join(dir, "repo")}}}
	// The swap, after the scan found the planted config.
	if err := os.Rename(gitDir, filepath.Join(dir, "moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, gitDir); err != nil {
		t.Fatal(err)
	}
	FixConfig(&f, "id", filepath.Join(dir, "quarantine"))
	got, err := os.ReadFile(filepath.Join(outside, "config"))
	if err != nil || string(got) != users {
		t.Errorf("the user's config behind the swapped directory became %q (%v), want it untouched", got, err)
	}
	if f.MoveErr == nil {
		t.Errorf("FixConfig through a symlinked directory succeeded: %+v", f)
	}
}
