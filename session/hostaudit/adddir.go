package hostaudit

import (
	"fmt"

	"github.com/agentbox/agentbox/gitguard/audit"
	"github.com/agentbox/agentbox/mounts"

	"github.com/agentbox/agentbox/policy"
)

// --add-dir (issue 16): each further writable directory gets the post-session audit,
// with its own pending journal, so that a killed launcher's audit is run by the next
// launch that adds it or works in it, or by the next launch in the session's
// repository (the journal names it: sharedOrphan), which may no longer add it.

// forDir is the policy as the Git guards of one added directory see it: that
// directory in the repository's place.
func forDir(p *policy.Policy, dir string) *policy.Policy {
	q := *p
	q.Repo, q.Workdir, q.AddDirs = dir, dir, nil
	return &q
}

// DirOrphans runs the audits that killed launchers left for added directories.
func DirOrphans(cfg *Config, p *policy.Policy) {
	for _, d := range p.AddDirs {
		Orphans(cfg, forDir(p, d))
	}
}

// Dirs are the added directories' audits of one session.
type Dirs struct{ list []*Auditor }

func StartDirs(cfg *Config, p *policy.Policy) (*Dirs, error) {
	d := &Dirs{}
	dcfg := *cfg
	dcfg.addedFor = p.Repo
	if h, err := audit.Hold(p.Repo); err == nil {
		dcfg.addedForID = h.ID()
		h.Close()
	}
	for _, dir := range p.AddDirs {
		a, err := Start(&dcfg, forDir(p, dir), nil)
		if err != nil {
			d.Finish(cfg, nil, false)
			return nil, fmt.Errorf("--add-dir %s: %w", dir, err)
		}
		d.list = append(d.list, a)
	}
	return d, nil
}

// Moved is the first added directory whose path no longer leads to the directory
// its audit holds (audit.Hold), "" when none.
func (d *Dirs) Moved() string {
	if d == nil {
		return ""
	}
	for _, a := range d.list {
		h, err := audit.Hold(a.repo)
		if err != nil {
			return a.repo
		}
		h.Close()
		if a.held == nil || h.Dev != a.held.Dev || h.Ino != a.held.Ino {
			return a.repo
		}
	}
	return ""
}

// Unbound is the first added directory whose audit does not hold the directory
// the plan binds (ids: mounts.Session.SourceIDs), "" when none.
func (d *Dirs) Unbound(ids map[string]mounts.FileID) string {
	if d == nil {
		return ""
	}
	for _, a := range d.list {
		if id, ok := ids[a.repo]; ok && !a.Holds(id) {
			return a.repo
		}
	}
	return ""
}

// finish audits each added directory when the command ran, else drops the journals.
func (d *Dirs) Finish(cfg *Config, out *Outcome, ran bool) {
	if d == nil {
		return
	}
	for _, a := range d.list {
		if ran {
			a.Finish(cfg, out)
		} else {
			a.Drop()
		}
	}
}
