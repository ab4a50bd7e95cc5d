//go:build !linux

package trustedexec

import "errors"

// Open is the trusted walk (open_linux.go), which reads Linux's /proc.
func Open(string, string) (*Opened, error) {
	return nil, errors.New("a trusted open needs Linux")
}
