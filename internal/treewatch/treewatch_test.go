package treewatch

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// watched starts a watch (with or without its reader) marking dir.
func watched(t *testing.T, dir string, reader bool) *Watch {
	t.Helper()
	noReader = !reader
	defer func() { noReader = false }()
	w, err := New()
	if err != nil {
		testenv.SkipKernel(t, "fanotify_fid", "unprivileged fanotify with file handles: %v", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := w.Add(fd); err != nil {
		w.Close()
		testenv.SkipKernel(t, "fanotify_fid", "mark a directory of TMPDIR: %v", err)
	}
	return w
}

// TestTouchedIsBounded: a session that makes files in a loop sends an event about a
// new inode each time; the watch's memory of touched inodes must stay bounded (past
// the bound it vouches for nothing), or the sandbox grows the launcher's heap for
// as long as the session runs. (A loop that makes and removes one file does the
// same where inode numbers are not reused: tmpfs, btrfs.)
func TestTouchedIsBounded(t *testing.T) {
	dir := t.TempDir()
	defer func(old int) { maxTouched = old }(maxTouched)
	maxTouched = 4096
	w := watched(t, dir, true)
	const n = 3 * 4096
	for i := range n {
		if err := unix.Mknod(filepath.Join(dir, fmt.Sprint(i)), unix.S_IFREG|0o644, 0); err != nil {
			t.Fatal(err)
		}
	}
	ch := w.Stop()
	if ch.Lost == "" || len(ch.inos) > maxTouched {
		t.Errorf("lost %q, %d inodes remembered after %d files made: its memory grows with the session", ch.Lost, len(ch.inos), n)
	}
}

// TestStopReadsWhatIsQueued: Stop takes every event queued before it, even when
// no reader took any (the reader's deadline must not stop Stop's own reading: the
// kernel matrix's 6.1 cell lost a directory made just before Stop so).
func TestStopReadsWhatIsQueued(t *testing.T) {
	dir := t.TempDir()
	w := watched(t, dir, false)
	if err := os.Mkdir(filepath.Join(dir, "new"), 0o755); err != nil {
		t.Fatal(err)
	}
	if ch := w.Stop(); ch.Lost == "" {
		t.Fatal("a directory was made before Stop, and the watch vouches for everything")
	}
	w = watched(t, dir, false)
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ch := w.Stop(); ch.Quiet() {
		t.Fatal("a file was written before Stop, and the watch saw nothing")
	}
}

// TestSnapshotSeesWhatCameBeforeAndGoesOn: a Snapshot in the middle of a session
// (a checkpoint) takes every event queued before it, whether or not the reader
// had taken it, and the watch goes on: a later change is in the next Snapshot and
// in Stop's, and the earlier ones stay.
func TestSnapshotSeesWhatCameBeforeAndGoesOn(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	w := watched(t, dir, true)
	if ch := w.Snapshot(); !ch.Quiet() {
		t.Fatalf("nothing changed, yet the snapshot says %+v", ch)
	}
	for i := range 50 {
		if err := os.WriteFile(filepath.Join(dir, "f"), []byte(fmt.Sprint(i)), 0o644); err != nil {
			t.Fatal(err)
		}
		if ch := w.Snapshot(); ch.Quiet() {
			t.Fatalf("round %d: a file was written before the snapshot, and it saw nothing", i)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "new"), 0o755); err != nil {
		t.Fatal(err)
	}
	if ch := w.Snapshot(); ch.Lost == "" {
		t.Fatal("a directory was made before the snapshot, and it vouches for everything")
	}
	if ch := w.Stop(); ch.Lost == "" {
		t.Fatal("Stop after a snapshot forgot what the watch saw")
	}
	if ch := w.Snapshot(); ch.Lost == "" {
		t.Fatal("a snapshot after Stop vouches for something")
	}
}

// TestStopReleasesTheGroup: Stop returns every event queued before it, and the
// group it releases beside the caller's work is closed once Released returns, so
// that a session keeps no descriptor of its watch.
func TestStopReleasesTheGroup(t *testing.T) {
	dir := t.TempDir()
	w := watched(t, dir, true)
	rc, err := w.f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	fd := -1
	rc.Control(func(f uintptr) { fd = int(f) }) // not Fd(), which would make it blocking
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ch := w.Stop()
	w.Released()
	if ch.Quiet() {
		t.Fatal("a file was written before Stop, and the watch saw nothing")
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != unix.EBADF {
		t.Fatalf("the watch's descriptor %d after Released: %v, want it closed", fd, err)
	}
	w.Released() // again: harmless
}
