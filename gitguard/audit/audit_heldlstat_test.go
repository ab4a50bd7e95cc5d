package audit

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestHeldLstatAsThroughProc: in a held directory, osLstat (one openat2 of the
// path itself beneath the descriptor) gives what an lstat through sys's
// /proc/self/fd/N/NAME gives, for every kind of file, a symlink as the last
// component (not followed), a symlink or a file on the way (refused), a missing
// name and the held directory itself — the mode os.Lstat would give and the same
// inode, or an error of the same kind.
func TestHeldLstatAsThroughProc(t *testing.T) {
	top, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join(top, "repo")
	g := filepath.Join(repo, ".git")
	for _, d := range []string{"refs/heads", "objects/info", "hooks"} {
		if err := os.MkdirAll(filepath.Join(g, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(g, "HEAD"), "ref: refs/heads/main\n")
	if err := unix.Chmod(filepath.Join(g, "HEAD"), 0o4751); err != nil { // unix: os.Chmod takes FileMode bits
		t.Fatal(err)
	}
	if err := unix.Chmod(filepath.Join(g, "hooks"), 0o3777); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(g, "FETCH_HEAD"), 0o600); err != nil {
		t.Fatal(err)
	}
	for link, to := range map[string]string{"packed-refs": "/etc/passwd", "info": "/etc", "gone": "nowhere", "objects/info/alternates": "../../HEAD"} {
		if err := os.Symlink(to, filepath.Join(g, link)); err != nil {
			t.Fatal(err)
		}
	}
	sock, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sock)
	if err := unix.Bind(sock, &unix.SockaddrUnix{Name: filepath.Join(g, "sock")}); err != nil {
		t.Fatal(err)
	}
	held, err := Hold(repo)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	s := newScanner(repo, repo, ScanOptions{Held: held})
	paths := []string{repo, g, filepath.Join(g, "HEAD"), filepath.Join(g, "hooks"), filepath.Join(g, "FETCH_HEAD"),
		filepath.Join(g, "packed-refs"), filepath.Join(g, "gone"), filepath.Join(g, "sock"), filepath.Join(g, "refs/heads"),
		filepath.Join(g, "objects/info/alternates"), filepath.Join(g, "MERGE_HEAD"), filepath.Join(g, "nodir/x"),
		filepath.Join(g, "info/exclude"), filepath.Join(g, "HEAD/x"), filepath.Join(g, "info")}
	beneath := 0
	for _, p := range paths {
		got, gerr := s.osLstat(p)
		if _, ok := got.(*statInfo); ok || errors.Is(gerr, fs.ErrNotExist) {
			beneath++
		}
		sp, done, err := s.sys(p)
		var want os.FileInfo
		werr := err
		if err == nil {
			want, werr = os.Lstat(sp)
			done()
		}
		if (gerr == nil) != (werr == nil) || errors.Is(gerr, fs.ErrNotExist) != errors.Is(werr, fs.ErrNotExist) {
			t.Errorf("%s: error %v, through /proc %v", p, gerr, werr)
			continue
		}
		if gerr != nil {
			continue
		}
		if got.Mode() != want.Mode() || got.IsDir() != want.IsDir() || got.Size() != want.Size() || !got.ModTime().Equal(want.ModTime()) {
			t.Errorf("%s: mode %v size %d mtime %v, through /proc %v %d %v", p, got.Mode(), got.Size(), got.ModTime(), want.Mode(), want.Size(), want.ModTime())
		}
		gs, ws := got.Sys().(*syscall.Stat_t), want.Sys().(*syscall.Stat_t)
		if gs == nil || gs.Ino != ws.Ino || gs.Dev != ws.Dev {
			t.Errorf("%s: not the same file as through /proc", p)
		}
	}
	// The new way must have answered (a stat or a missing name) for all but the
	// paths refused on the way (info/exclude, HEAD/x: sys's way reports those).
	if beneath != len(paths)-2 {
		t.Errorf("%d of %d paths stat'ed beneath the descriptor, want %d", beneath, len(paths), len(paths)-2)
	}
}
