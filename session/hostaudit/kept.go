package hostaudit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentbox/agentbox/agentcfg"
	"github.com/agentbox/agentbox/gitguard/audit"
	"github.com/agentbox/agentbox/policy"
)

// The audit of the kept paths (--keep, --keep-agent): the agents' directories the
// session writes on the host, whose exec surface (hooks, settings, MCP servers) an
// agent run later outside the sandbox would obey. The ledger and the scans are
// agentcfg's; this file starts and finishes them with the session.

// SessionID names a session: its shadow record's id (recordID), else a fresh audit id.
func SessionID(recordID string) string {
	if recordID != "" {
		return recordID
	}
	return audit.NewAuditID()
}

// StartKept takes the baseline of the repository's own agent files, and
// registers the session in the kept paths' ledger (agentcfg), which takes its
// baseline — the ledger's own where another live session keeps the same files —
// after auditing sessions whose launchers died. A session whose baseline the
// ledger cannot hold is refused (JournalError).
func StartKept(cfg *Config, p *policy.Policy, id string, out *Outcome) (*Kept, error) {
	var project *agentcfg.Project
	if !p.ReadOnly {
		project = agentcfg.SnapshotProject(p.Repo)
	}
	if len(p.Keep) == 0 {
		return &Kept{project: project}, nil
	}
	opt := agentcfg.Options{Home: p.Home, Repo: p.Repo, ID: id, AgentDirs: map[string]string{},
		Skip: append(append([]string(nil), p.KeepReadOnly...), p.KeepPrivate...), WidenJournal: WidenJournal(p.StateDir)}
	for _, k := range p.Keep {
		opt.Kept = append(opt.Kept, k.Path)
	}
	// An agent's directory moved by the environment the command inherits is the
	// one it uses inside and outside. It is taken as the variable names it, not
	// resolved once here: a symlink on its way inside a kept path is the
	// session's to change (~/.config/zsh -> ../dotfiles/zsh replaced by a
	// directory), and the audit resolves it each time (agentcfg's linkedInto).
	for agent, env := range agentcfg.AgentDirEnv() {
		if d := os.Getenv(env); filepath.IsAbs(d) {
			opt.AgentDirs[agent] = filepath.Clean(d)
		}
	}
	opt.Quarantine = QuarantineRoot(cfg.Stderr, p.StateDir, append([]string{p.Repo}, opt.Kept...))
	// As the repository's journal (Start): no kept path is given writable
	// without its baseline in the ledger, where the next launch finds it if this
	// launcher is killed.
	if p.StateDir == "" {
		return nil, JournalError(errors.New("kept paths' audit ledger: no state directory"), "")
	}
	s, orphans, err := agentcfg.Begin(p.StateDir, opt)
	for _, o := range orphans {
		fmt.Fprintf(cfg.Stderr, "agentbox: audit: kept paths: session %s was killed before its audit; audited now: %d finding(s)\n", o.ID, len(o.Findings))
		report(cfg, out, o.Findings)
	}
	if err != nil {
		return nil, JournalError(err, p.StateDir)
	}
	return &Kept{ledger: s, project: project}, nil
}

// Kept is one session's audit of its kept paths, through the ledger.
type Kept struct {
	ledger  *agentcfg.Session
	project *agentcfg.Project // the repository's agent files: reported, not moved
}

// Finish puts back what the session added to the kept exec surface and reports
// it, one line per finding, like the Git audit. It runs even when the backend
// reports a failure: the command may have started before it, and an audit of a
// session that wrote nothing finds nothing.
func (a *Kept) Finish(cfg *Config, out *Outcome) {
	if a == nil {
		return
	}
	if a.ledger != nil {
		report(cfg, out, a.ledger.Finish())
	}
	report(cfg, out, a.project.Report())
}

func report(cfg *Config, out *Outcome, fs []agentcfg.Finding) {
	for _, f := range fs {
		out.found(cfg.Stderr, f.String())
		if f.Unresolved {
			out.Unresolved++
		}
	}
}
