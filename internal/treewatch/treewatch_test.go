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

// TestRenamedOnlyWhenNamesChange: a file written, chmod'ed or opened in place leaves
// its directory's names as they were (Dirty, not Renamed; the file Touched, its
// neighbour not), so that an end scan may keep the listing and lstat that file
// alone; an entry made, removed or moved, or the directory itself changed, is a
// rename.
func TestRenamedOnlyWhenNamesChange(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a", "b"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ino := func(name string) uint32 {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, name), &st); err != nil {
			t.Fatal(err)
		}
		return uint32(st.Ino)
	}
	inPlace := map[string]func() error{
		"write":    func() error { return os.WriteFile(filepath.Join(dir, "a"), []byte("changed"), 0o644) },
		"chmod":    func() error { return os.Chmod(filepath.Join(dir, "a"), 0o600) },
		"truncate": func() error { return os.Truncate(filepath.Join(dir, "a"), 1) },
	}
	for what, change := range inPlace {
		w := watched(t, dir, true)
		if err := change(); err != nil {
			t.Fatal(err)
		}
		ch := w.Stop()
		if !ch.Dirty(0) || ch.Renamed(0) || !ch.Touched(ino("a")) || ch.Touched(ino("b")) {
			t.Errorf("%s of a file: dirty %v, renamed %v, the file touched %v, its neighbour %v; want true, false, true, false",
				what, ch.Dirty(0), ch.Renamed(0), ch.Touched(ino("a")), ch.Touched(ino("b")))
		}
	}
	renames := []struct {
		what   string
		change func() error
	}{
		{"create", func() error { return os.WriteFile(filepath.Join(dir, "c"), nil, 0o644) }},
		{"remove", func() error { return os.Remove(filepath.Join(dir, "c")) }},
		{"rename", func() error { return os.Rename(filepath.Join(dir, "b"), filepath.Join(dir, "b2")) }},
		{"link", func() error { return os.Link(filepath.Join(dir, "a"), filepath.Join(dir, "a2")) }},
		{"symlink over", func() error {
			if err := os.Symlink("a", filepath.Join(dir, "s")); err != nil {
				return err
			}
			return os.Rename(filepath.Join(dir, "s"), filepath.Join(dir, "a2"))
		}},
		{"chmod of the directory", func() error { return os.Chmod(dir, 0o750) }},
	}
	for _, r := range renames {
		w := watched(t, dir, true)
		if err := r.change(); err != nil {
			t.Fatal(r.what, err)
		}
		if ch := w.Stop(); !ch.Renamed(0) {
			t.Errorf("%s: the directory's names changed, and the watch says they did not", r.what)
		}
	}
}
