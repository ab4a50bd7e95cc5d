package leftovers

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestGCGitConfigCopies: gc removes the Git config copies not written for a day
// and keeps a fresh one, one being written, and a symlink.
func TestGCGitConfigCopies(t *testing.T) {
	cache := t.TempDir()
	dir := filepath.Join(cache, "gitconfig")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	old, fresh, writing := filepath.Join(dir, "aaaa"), filepath.Join(dir, "bbbb"), filepath.Join(dir, ".tmp-1")
	for _, f := range []string{old, fresh, writing} {
		if err := os.WriteFile(f, []byte("[core]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(dir, "cccc")
	if err := os.Symlink(old, link); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-GitConfigCopyAge - time.Hour)
	for _, f := range []string{old, writing} {
		if err := os.Chtimes(f, past, past); err != nil {
			t.Fatal(err)
		}
	}
	found, err := GC(GCOptions{CacheDir: cache, DryRun: true})
	if err != nil || len(found) != 1 || found[0].Path != old || found[0].Removed {
		t.Fatalf("dry run: %+v, %v", found, err)
	}
	found, err = GC(GCOptions{CacheDir: cache})
	if err != nil || len(found) != 1 || found[0].Path != old || !found[0].Removed || found[0].Kind != GitConfigCopyKind {
		t.Fatalf("GC found %+v, %v", found, err)
	}
	for _, keep := range []string{fresh, writing, link} {
		if _, err := os.Lstat(keep); err != nil {
			t.Errorf("%s removed: %v", keep, err)
		}
	}
	if _, err := os.Lstat(old); !os.IsNotExist(err) {
		t.Errorf("the old copy is still there: %v", err)
	}
}
