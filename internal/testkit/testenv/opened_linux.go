package testenv

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Opened reports whether the file at path itself (not followed: a FIFO or a device
// node) was opened while fn ran, by anyone, as an inotify watch sees it (IN_OPEN).
// An O_PATH open opens nothing and is not reported: a caller that looks at what a
// path leads to before opening it passes, one that opens it first does not.
func Opened(t testing.TB, path string, fn func()) bool {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, path, unix.IN_OPEN|unix.IN_DONT_FOLLOW); err != nil {
		t.Fatal(err)
	}
	fn()
	var buf [4096]byte
	n, err := unix.Read(fd, buf[:])
	if err == unix.EAGAIN {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// LinkedFIFO makes a FIFO in dir and a symlink called name to it beside it: what a
// session can leave where the launcher reads a file through links. Opened on the
// FIFO then tells whether a reader opened it before judging it.
func LinkedFIFO(t testing.TB, dir, name string) (fifo, link string) {
	t.Helper()
	fifo, link = dir+"/fifo", dir+"/"+name
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	return fifo, link
}

// RefusesLinkedFIFO checks that read, given a symlink called name to a FIFO,
// refuses it with an error saying it is not a regular file, without having opened
// the FIFO: what a reader of a planted link must do, since a device in the FIFO's
// place would have been opened (a watchdog is armed by its open).
func RefusesLinkedFIFO(t testing.TB, name string, read func(path string) error) {
	t.Helper()
	fifo, link := LinkedFIFO(t, t.TempDir(), name)
	var err error
	if Opened(t, fifo, func() { err = read(link) }) {
		t.Errorf("%s: the FIFO a link led to was opened before it was judged", name)
	}
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("%s, a link to a FIFO: %v, want not a regular file", name, err)
	}
}
