package protocol

import (
	"strings"

	"github.com/agentbox/agentbox/backend"
)

// Phase is one measured step of a launch, as the Go init reports its own (the
// backend seam's type: one type from the init's frame to the session's record).
type Phase = backend.Phase

// Names both sides of the control socket share.
const (
	// EnvRole marks the re-executed Go init; its value is the control socket's fd.
	EnvRole = "_AGENTBOX_NSINIT"
	// EnvIDMap asks the init to write its own uid and gid maps ("UID:GID").
	EnvIDMap = "_AGENTBOX_NSINIT_IDMAP"
	// InitArgv0 names the init role (with EnvRole set).
	InitArgv0 = "agentbox-init"
	// ExitSetup is the init's status when setup failed before the command started.
	ExitSetup = 125
)

// Getenv is the value of key in env (the last one wins, as for a process), "" when
// it is not set: the command's environment travels in the plan frame, and both
// inits look up its PATH.
func Getenv(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}
