//go:build !linux

package sshagent

import (
	"os"
	"syscall"
)

// openKeyFile opens path for reading when it is a regular file, without waiting
// for a FIFO's writer (keyfile_linux.go also keeps devices unopened).
func openKeyFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, errNotRegular
	}
	return f, nil
}
