//go:build linux && (!amd64 || race)

package nsinit

import "testing"

// waitRawFree: no raw init here (rawlaunch_other_linux.go), nothing to wait for.
func waitRawFree(*testing.T) {}

func waitRawFreeB(testing.TB) {}
