package termout

import (
	"os"

	"golang.org/x/sys/unix"
)

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// reopenNonblocking opens f's terminal again, write-only, non-blocking, and never as
// a controlling terminal; Go's poller then serves its deadlines.
func reopenNonblocking(f *os.File) (*os.File, error) {
	fd, err := unix.Open(fdPath(f), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// columns is the terminal's width, 0 when unknown.
func columns(f *os.File) int {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}
