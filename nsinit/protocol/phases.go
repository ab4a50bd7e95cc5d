package protocol

import (
	"strings"
	"time"
)

// Phase is one measured step of a launch.
type Phase struct {
	Name string        `json:"name"`
	Dur  time.Duration `json:"ns"`
}

// Timer records consecutive phases, each from the previous mark: the init's setup
// steps, and the launcher's own around the backend.
type Timer struct {
	start, last time.Time
	Phases      []Phase
}

// NewTimer starts timing now.
func NewTimer() *Timer {
	now := time.Now()
	return &Timer{start: now, last: now}
}

// Mark ends the phase that ran since the previous mark and names it.
func (t *Timer) Mark(name string) {
	now := time.Now()
	t.Phases = append(t.Phases, Phase{Name: name, Dur: now.Sub(t.last)})
	t.last = now
}

// Skip starts a new phase without recording the time since the previous mark.
func (t *Timer) Skip() { t.last = time.Now() }

// Total is the time since the timer started.
func (t *Timer) Total() time.Duration { return time.Since(t.start) }

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
