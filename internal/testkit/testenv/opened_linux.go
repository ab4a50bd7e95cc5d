package testenv

import (
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
