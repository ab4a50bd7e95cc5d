package snapshot

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPutBackRefusesRedirectedRepo: the repository's path as the snapshot names it
// goes through a symlink now (a session of a repository around it replaced a parent
// directory): PutBack must write no Git dir, neither the one the link leads to.
func TestPutBackRefusesRedirectedRepo(t *testing.T) {
	base := tmpDir(t)
	repo := filepath.Join(base, "outer", "mid", "inner")
	victim := filepath.Join(base, "victim", "inner")
	for _, d := range []string{filepath.Join(repo, ".git", "refs", "heads"), filepath.Join(victim, ".git", "refs", "heads")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(victim, ".git", "HEAD"), "ref: refs/heads/main\n")
	st := &GitState{
		Manifest: Manifest{GitDir: filepath.Join(repo, ".git"), GitCommonDir: filepath.Join(repo, ".git")},
		Files:    map[string][]byte{"HEAD": []byte("ref: refs/heads/planted\n"), "refs/heads/planted": []byte(strings.Repeat("a", 40) + "\n")},
	}
	mid := filepath.Join(base, "outer", "mid")
	if err := os.Rename(mid, mid+".real"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "victim"), mid); err != nil {
		t.Fatal(err)
	}
	for _, dry := range []bool{true, false} {
		if _, err := PutBack(repo, st, dry); err == nil || !strings.Contains(err.Error(), "symlink") {
			t.Errorf("PutBack (dry run %v) through a symlinked parent: want an error naming the symlink, got %v", dry, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(victim, ".git", "HEAD")); string(b) != "ref: refs/heads/main\n" {
		t.Errorf("PutBack wrote the victim's HEAD: %q", b)
	}
	if _, err := os.Lstat(filepath.Join(victim, ".git", "refs", "heads", "planted")); err == nil {
		t.Error("PutBack wrote a ref into the victim's Git dir")
	}
}
