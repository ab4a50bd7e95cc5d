package hostaudit

import (
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
// after auditing sessions whose launchers died. Without a ledger the audit still
// runs, from a baseline of its own.
func StartKept(cfg *Config, p *policy.Policy, id string, out *Outcome) *Kept {
	var project *agentcfg.Project
	if !p.ReadOnly {
		project = agentcfg.SnapshotProject(p.Repo)
	}
	if len(p.Keep) == 0 {
		return &Kept{project: project}
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
	if p.StateDir == "" {
		fmt.Fprintf(cfg.Stderr, "agentbox: warning: kept paths: no state directory; if this launcher is killed, the session goes unaudited\n")
		return &Kept{base: agentcfg.Snapshot(opt), project: project}
	}
	s, orphans, err := agentcfg.Begin(p.StateDir, opt)
	for _, o := range orphans {
		fmt.Fprintf(cfg.Stderr, "agentbox: audit: kept paths: session %s was killed before its audit; audited now: %d finding(s)\n", o.ID, len(o.Findings))
		report(cfg, out, o.Findings)
	}
	if err != nil {
		fmt.Fprintf(cfg.Stderr, "agentbox: warning: %v: if this launcher is killed, the session goes unaudited\n", err)
		return &Kept{base: agentcfg.Snapshot(opt), project: project}
	}
	return &Kept{ledger: s, project: project}
}

// Kept is one session's audit of its kept paths: through the ledger, or
// from a baseline of its own when the ledger could not be used.
type Kept struct {
	ledger  *agentcfg.Session
	base    *agentcfg.Baseline
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
	switch {
	case a.ledger != nil:
		report(cfg, out, a.ledger.Finish())
	case a.base != nil:
		report(cfg, out, a.base.Audit())
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
