package treewatch

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestTouchedIsBounded: a session that makes and removes files in a loop on a
// filesystem that never reuses inode numbers (tmpfs, btrfs) sends an event about a
// new inode each time; the watch's memory of touched inodes must stay bounded
// (past the bound it vouches for nothing), or the sandbox grows the launcher's
// heap for as long as the session runs.
func TestTouchedIsBounded(t *testing.T) {
	dir := t.TempDir()
	if os.Geteuid() == 0 {
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=16m"); err == nil {
			defer unix.Unmount(dir, unix.MNT_DETACH)
		}
	}
	defer func(old int) { maxTouched = old }(maxTouched)
	maxTouched = 4096
	w, err := New()
	if err != nil {
		t.Skipf("fanotify: %v", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := w.Add(fd); err != nil {
		w.Close()
		t.Skipf("Add: %v", err)
	}
	const n = 3 * 4096
	p := filepath.Join(dir, "f")
	for range n {
		if err := unix.Mknod(p, unix.S_IFREG|0o644, 0); err != nil {
			t.Fatal(err)
		}
		if err := unix.Unlink(p); err != nil {
			t.Fatal(err)
		}
	}
	ch := w.Stop()
	t.Logf("lost %q, %d inodes remembered after %d files made and removed", ch.Lost, len(ch.inos), n)
	if ch.Lost == "" && len(ch.inos) > n/2 {
		t.Errorf("the watch remembers %d inodes and still vouches: its memory grows with the session", len(ch.inos))
	}
}
