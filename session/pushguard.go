package session

import (
	"flag"

	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/policy"
)

func registerPushFlags(fs *flag.FlagSet, cfg *Config) {}

// pushGuard is the staged P9 policy executables and the read-only binds that put them
// in the sandbox.
type pushGuard struct {
	ops []mounts.Op
}

// preparePushGuard stages the guard below the host's /tmp; cleanup removes it.
func preparePushGuard(cfg *Config, p *policy.Policy) (*pushGuard, error) { return &pushGuard{}, nil }

// pushGuardDryRun is the guard's binds as --dry-run shows them, staging nothing.
func pushGuardDryRun(cfg *Config, p *policy.Policy) []mounts.Op { return nil }

func (g *pushGuard) cleanup() {}
