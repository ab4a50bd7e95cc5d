//go:build !linux

package compat

import (
	"errors"

	"github.com/agentbox/agentbox/mounts"
)

// Run fails: bubblewrap, and so this backend, exists only on Linux.
func Run(plan mounts.Plan, stdio Stdio) (Result, error) {
	return Result{}, errors.New("bwrap backend: needs Linux")
}
