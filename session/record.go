package session

import (
	"flag"
	"time"

	"github.com/agentbox/agentbox/policy"
)

func registerRecordFlags(fs *flag.FlagSet, cfg *Config) {}

// recorder records the session in the shadow repository; a nil recorder records nothing.
type recorder struct{}

// startRecord records the repository's state at launch. A failure to record is
// reported on stderr and never stops the session.
func startRecord(cfg *Config, p *policy.Policy, start time.Time) *recorder { return nil }

func (r *recorder) finish(cfg *Config, out *Outcome) {}
