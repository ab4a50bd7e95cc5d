//go:build !linux

package bwrapcheck

import "errors"

// open is the trusted walk (open_linux.go); bubblewrap exists only on Linux.
func open(string) (*opened, error) {
	return nil, errors.New("bubblewrap runs only on Linux")
}
