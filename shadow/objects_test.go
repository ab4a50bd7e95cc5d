package shadow

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestStoredZlib: the stored-block stream inflates to its parts with Go's zlib
// reader (which checks the Adler-32 sum), at the sizes around a block's bound.
func TestStoredZlib(t *testing.T) {
	for _, n := range []int{0, 1, 65534, 65535, 65536, 3*65535 + 7} {
		body := bytes.Repeat([]byte("agentbox"), n/8+1)[:n]
		hdr := []byte("blob " + strings.Repeat("9", n%5) + "\x00")
		z := storedZlib(hdr, body)
		r, err := zlib.NewReader(bytes.NewReader(z))
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		got, err := io.ReadAll(r)
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if want := append(append([]byte(nil), hdr...), body...); !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: inflated %d bytes, want %d", n, len(got), len(want))
		}
	}
}

// TestWriteObjectAsGitWrites: an object written through an unnamed file, and
// through the named fallback, is what Git reads under its id, read-only whatever
// the umask, with nothing else left in its directory; an object already there is
// left as it is.
func TestWriteObjectAsGitWrites(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", "--bare", dir).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	defer syscall.Umask(syscall.Umask(0o077))
	s := &Store{Dir: dir}
	check := func(id string, body []byte) {
		t.Helper()
		out, err := exec.Command("git", "--git-dir", dir, "cat-file", "blob", id).Output()
		if err != nil || !bytes.Equal(out, body) {
			t.Fatalf("git cat-file %s: %v, %q", id, err, out)
		}
		hash := exec.Command("git", "--git-dir", dir, "hash-object", "--stdin")
		hash.Stdin = bytes.NewReader(body)
		if want, err := hash.Output(); err != nil || strings.TrimSpace(string(want)) != id {
			t.Fatalf("id %s, git hash-object says %s", id, want)
		}
		fan := filepath.Join(dir, "objects", id[:2])
		ents, err := os.ReadDir(fan)
		if err != nil || len(ents) != 1 || ents[0].Name() != id[2:] {
			t.Fatalf("%s holds %v (%v), want the object alone", fan, ents, err)
		}
		if fi, err := os.Lstat(filepath.Join(fan, id[2:])); err != nil || fi.Mode() != 0o444 {
			t.Fatalf("the object's mode: %v %v, want -r--r--r--", fi.Mode(), err)
		}
	}
	body := []byte("written in place\n")
	id, err := s.writeObject("blob", body)
	if err != nil {
		t.Fatal(err)
	}
	check(id, body)
	before, _ := os.Lstat(filepath.Join(dir, "objects", id[:2], id[2:]))
	if again, err := s.writeObject("blob", body); err != nil || again != id {
		t.Fatalf("written again: %s %v", again, err)
	}
	if after, _ := os.Lstat(filepath.Join(dir, "objects", id[:2], id[2:])); !os.SameFile(before, after) {
		t.Fatal("an object already stored was replaced")
	}
	// The named fallback, where the filesystem has no unnamed files.
	body = []byte("through a named file\n")
	hdr := "blob " + strconv.Itoa(len(body)) + "\x00"
	sum := sha1.Sum(append([]byte(hdr), body...))
	named := hex.EncodeToString(sum[:])
	fan := filepath.Join(dir, "objects", named[:2])
	if err := os.MkdirAll(fan, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := putLooseNamed(fan, filepath.Join(fan, named[2:]), storedZlib([]byte(hdr), body)); err != nil {
		t.Fatal(err)
	}
	check(named, body)
}
