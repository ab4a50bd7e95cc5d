package session

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/agentbox/agentbox/internal/treewalk"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/shadow"
)

func registerRecordFlags(fs *flag.FlagSet, cfg *Config) {
	fs.BoolVar(&cfg.NoRecord, "no-record", false, "do not record the session in the shadow repository (agentbox log)")
}

// recorder records the session in the shadow repository; a nil recorder records nothing.
type recorder struct {
	stateDir, repo string
	sess           *shadow.Session // nil until begin, and when the store could not be opened
	began          bool
	base           shadow.Record // the record as known at launch
}

// startRecord prepares the session's record. The shadow repository is opened by
// begin, beside the launch (prelaunch.go). A failure to record is reported on stderr
// and never stops the session.
func startRecord(cfg *Config, p *policy.Policy, start time.Time) *recorder {
	if cfg.NoRecord {
		return nil
	}
	if p.StateDir == "" {
		warnRecord(cfg, "session not recorded: no state directory ($XDG_STATE_HOME and $HOME are unset)")
		return nil
	}
	host, _ := os.Hostname()
	return &recorder{stateDir: p.StateDir, repo: p.Repo, base: shadow.Record{
		ID:      shadow.NewID(start),
		Command: p.Command,
		Args:    cfg.Args,
		Backend: p.Backend,
		Policy: shadow.Policy{
			Repo: p.Repo, Home: p.Home, Workdir: p.Workdir, Offline: p.Offline, DiskTmp: p.DiskTmp, AllowNet: p.AllowNet,
			Backend: p.Backend, StateDir: p.StateDir, CacheDir: p.CacheDir,
			SSHAgent: p.SSHAgent != "", SSHKeys: p.SSHKeys,
		},
		Start:       start,
		LauncherPID: os.Getpid(),
		UID:         os.Getuid(),
		Host:        host,
	}}
}

// begin opens the shadow repository and records the start state, before the
// command starts. w is the audit baseline's walk of the working tree (nil: none),
// from which the recorder takes what changed since the last record instead of
// sweeping the tree again.
func (r *recorder) begin(cfg *Config, w *treewalk.Walk) {
	if r == nil || r.began {
		return
	}
	r.began = true
	store, err := shadow.Open(r.stateDir, r.repo)
	if err != nil {
		warnRecord(cfg, "session not recorded: %v", err)
		return
	}
	// What a bound stopped (a FIFO in the working tree, say) is named on stderr as
	// well as in the record's notes.
	store.Warn = func(line string) { warnRecord(cfg, "%s", line) }
	store.Progress = terminal(cfg.Stderr)
	// BeginWalk returns a usable session even when the start state could not be
	// recorded; finish records the session with that error in its notes.
	r.sess, err = store.BeginWalk(r.base, w)
	if err != nil {
		warnRecord(cfg, "session's start state not recorded: %v", err)
	}
}

// finish records the end state with the session's outcome.
func (r *recorder) finish(cfg *Config, out *Outcome) {
	if r == nil {
		return
	}
	r.begin(cfg, nil) // a launch that stopped before the command: start is end
	if r.sess == nil {
		return // the store could not be opened: begin said so
	}
	rec := r.base
	rec.Backend, rec.BackendVersion = out.Backend, out.BackendVersion
	rec.End = out.End
	rec.ExitStatus = out.Status
	rec.KilledLeft = out.Left
	if out.Err != nil {
		rec.ExitStatus, rec.Error = 125, out.Err.Error()
	}
	for _, ph := range out.Phases {
		rec.Phases = append(rec.Phases, shadow.Phase{Name: ph.Name, NS: ph.Dur.Nanoseconds()})
	}
	rec.SnapshotZip = out.SnapshotZip
	rec.AuditFindings = out.AuditFindings
	rec.Notes = append(rec.Notes, out.Notes...)
	for _, r := range out.NetRefusals {
		rec.NetRefusals = append(rec.NetRefusals, shadow.NetRefusal(r))
	}
	for _, e := range out.SSHAgent {
		rec.SSHAgent = append(rec.SSHAgent, shadow.SSHAgentEvent(e))
	}
	if err := r.sess.FinishWalk(rec, out.walk); err != nil {
		warnRecord(cfg, "session not recorded: %v", err)
	}
}

// warnRecord reports a recording failure on one line; the session goes on.
func warnRecord(cfg *Config, format string, args ...any) {
	w := cfg.Stderr
	if w == nil {
		w = os.Stderr
	}
	fmt.Fprintf(w, "agentbox: warning: "+format+" (--no-record skips recording)\n", args...)
}
