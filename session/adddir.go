package session

import (
	"fmt"

	"github.com/agentbox/agentbox/gitguard"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/policy"
)

// --add-dir (issue 16): each further writable directory gets what the repository
// gets from Git's side when it is a work tree: its exec surface bound read-only
// (P7, placeholders included) and the post-session audit, with its own pending
// journal so a killed launcher's audit is run by the next launch that adds it or
// works in it. It gets no metadata snapshot (P8) and no shadow record: those stay
// the repository's.

// forDir is the policy as the Git guards of one added directory see it: that
// directory in the repository's place.
func forDir(p *policy.Policy, dir string) *policy.Policy {
	q := *p
	q.Repo, q.Workdir, q.AddDirs = dir, dir, nil
	return &q
}

// addDirProtected lists the protected Git paths of every added directory.
func addDirProtected(p *policy.Policy) ([]mounts.Protected, error) {
	var all []mounts.Protected
	for _, d := range p.AddDirs {
		prot, err := gitguard.ProtectedPaths(d)
		if err != nil {
			return nil, fmt.Errorf("--add-dir %s: protect Git paths: %w", d, err)
		}
		all = append(all, prot...)
	}
	return all, nil
}

// auditDirOrphans runs the audits that killed launchers left for added directories.
func auditDirOrphans(cfg *Config, p *policy.Policy) {
	for _, d := range p.AddDirs {
		auditOrphans(cfg, forDir(p, d))
	}
}

// dirAudits are the added directories' audits of one session.
type dirAudits struct{ list []*auditor }

func startDirAudits(cfg *Config, p *policy.Policy) (*dirAudits, error) {
	d := &dirAudits{}
	for _, dir := range p.AddDirs {
		a, err := startAudit(cfg, forDir(p, dir), nil)
		if err != nil {
			d.finish(cfg, nil, false)
			return nil, fmt.Errorf("--add-dir %s: %w", dir, err)
		}
		d.list = append(d.list, a)
	}
	return d, nil
}

// finish audits each added directory when the command ran, else drops the journals.
func (d *dirAudits) finish(cfg *Config, out *Outcome, ran bool) {
	if d == nil {
		return
	}
	for _, a := range d.list {
		if ran {
			a.finish(cfg, out)
		} else {
			a.drop()
		}
	}
}
