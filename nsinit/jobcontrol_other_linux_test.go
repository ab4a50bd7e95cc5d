//go:build linux && !amd64

package nsinit

// rawInitHere: the raw init is amd64-only.
func rawInitHere() bool { return false }
