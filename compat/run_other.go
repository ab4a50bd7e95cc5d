//go:build !linux

package compat

import (
	"errors"

	"github.com/agentbox/agentbox/backend"
	"github.com/agentbox/agentbox/mounts"
)

// Driver is the bwrap backend as a backend.Driver; it fails off Linux.
type Driver struct{}

// Run fails: bubblewrap, and so this backend, exists only on Linux.
func (Driver) Run(mounts.Plan, backend.Options) (backend.Result, error) {
	return backend.Result{}, errors.New("bwrap backend: needs Linux")
}
