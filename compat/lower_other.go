//go:build !unix

package compat

import "errors"

// hostLower has no owner to compare on this OS; the bwrap backend is Linux-only.
func hostLower(path string) (uint32, error) {
	return 0, errors.New("overlay source: owner and mode unavailable on this OS")
}
