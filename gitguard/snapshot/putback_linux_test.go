package snapshot

import (
	"bytes"
	"crypto/sha1"
	"encoding/binary"
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

// TestPutBackRefusesUnsafeIndex: a snapshot taken while another session ran holds
// the index that session wrote, naming .git/hooks/post-checkout; its audit moved it
// out of .git afterwards. undo --git must not put it back, where the operator's next
// git checkout -- . would write the hook and run it; an index Git would write is put
// back as before.
func TestPutBackRefusesUnsafeIndex(t *testing.T) {
	index := func(paths ...string) []byte {
		var b bytes.Buffer
		b.WriteString("DIRC")
		binary.Write(&b, binary.BigEndian, []uint32{2, uint32(len(paths))})
		for _, p := range paths {
			var e bytes.Buffer
			binary.Write(&e, binary.BigEndian, []uint32{0, 0, 0, 0, 0, 0, 0o100755, 0, 0, 1})
			e.Write(bytes.Repeat([]byte{0xab}, 20))
			binary.Write(&e, binary.BigEndian, uint16(len(p)))
			e.WriteString(p)
			e.Write(make([]byte, 8-e.Len()%8))
			b.Write(e.Bytes())
		}
		sum := sha1.Sum(b.Bytes())
		return append(b.Bytes(), sum[:]...)
	}
	repo := filepath.Join(tmpDir(t), "repo")
	if err := os.MkdirAll(filepath.Join(repo, ".git", "refs", "heads"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(repo, ".git", "HEAD"), "ref: refs/heads/main\n")
	gitDir := filepath.Join(repo, ".git")
	state := func(idx []byte) *GitState {
		return &GitState{
			Manifest: Manifest{GitDir: gitDir, GitCommonDir: gitDir},
			Files:    map[string][]byte{"HEAD": []byte("ref: refs/heads/main\n"), "index": idx},
		}
	}
	for _, dry := range []bool{true, false} {
		_, err := PutBack(repo, state(index(".git/hooks/post-checkout", "README")), dry)
		if err == nil || !strings.Contains(err.Error(), ".git/hooks/post-checkout") {
			t.Errorf("PutBack (dry run %v) of an index naming a hook: want an error naming it, got %v", dry, err)
		}
		if _, err := os.Lstat(filepath.Join(gitDir, "index")); err == nil {
			t.Fatalf("PutBack (dry run %v) wrote the index", dry)
		}
	}
	if _, err := PutBack(repo, state(index("README", "src/main.go")), false); err != nil {
		t.Fatalf("PutBack of an index Git would write: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(gitDir, "index")); err != nil {
		t.Errorf("the index Git would write is not put back: %v", err)
	}
}
