package session

import (
	"flag"

	"github.com/agentbox/agentbox/policy"
)

// GitSaveConfig are the snapshot flags.
type GitSaveConfig struct{}

func registerGitSaveFlags(fs *flag.FlagSet, cfg *Config) {}

// gitSnapshot writes the P8 metadata snapshot before launch and returns the ZIP's path
// ("" when none was written). An error stops the launch (exit 125).
func gitSnapshot(cfg *Config, p *policy.Policy) (string, error) { return "", nil }
