//go:build !linux

package safepath

import (
	"os"
	"syscall"
)

// OpenRegularFollow opens path for reading, through symlinks, when it is a regular
// file, without waiting for a FIFO's writer (follow_linux.go also leaves devices
// unopened).
func OpenRegularFollow(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, ErrNotRegular
	}
	return f, nil
}
