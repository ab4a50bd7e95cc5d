package nsinit

import (
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/nsinit/program"
)

// ErrSourceChanged is why a backend refuses a bind source whose identity is not the
// one the launcher verified (mounts.Op.SourceID): something swapped it in between.
var ErrSourceChanged = program.ErrSourceChanged

// MountError is a failed mount-related system call of the compiled plan, in the
// words of a strace line (program.MountError).
type MountError = program.MountError

// CheckSourceID checks that fd, a source opened for a bind, has the identity want
// (mounts.Op.SourceID; zero: unchecked). An other one is ErrSourceChanged.
func CheckSourceID(fd int, want mounts.FileID) error { return program.CheckSourceID(fd, want) }
