// Package record is what a session leaves on the host for later: the Git metadata
// snapshot taken before the command (P8, gitguard/snapshot) and the shadow record
// of the session (package shadow), with the Outcome both are made from.
package record

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/backend"
	"github.com/agentbox/agentbox/internal/treewalk"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/shadow"
)

// Recorder records the session in the shadow repository; a nil Recorder records nothing.
type Recorder struct {
	stateDir, repo string
	sess           *shadow.Session // nil until begin, and when the store could not be opened
	began          bool
	base           shadow.Record // the record as known at launch
}

// Start prepares the session's record. The shadow repository is opened by
// begin, beside the launch (the session's prelaunch). A failure to record is reported on stderr
// and never stops the session.
func Start(cfg *Config, p *policy.Policy, start time.Time) *Recorder {
	if cfg.NoRecord {
		return nil
	}
	if p.StateDir == "" {
		warnRecord(cfg, "session not recorded: no state directory ($XDG_STATE_HOME and $HOME are unset)")
		return nil
	}
	host, _ := os.Hostname()
	return &Recorder{stateDir: p.StateDir, repo: p.Repo, base: shadow.Record{
		ID:      shadow.NewID(start),
		Command: p.Command,
		Args:    cfg.Args,
		Backend: p.Backend,
		Policy: shadow.Policy{
			Repo: p.Repo, Home: p.Home, Workdir: p.Workdir, Offline: p.Offline, DiskTmp: p.DiskTmp, AllowNet: p.AllowNet,
			Backend: p.Backend, StateDir: p.StateDir, CacheDir: p.CacheDir,
			SSHAgent: p.SSHAgent != "", SSHKeys: p.SSHKeys,
			Memory: p.Limits.Memory, Pids: p.Limits.Pids, MilliCPUs: p.Limits.MilliCPUs,
			HostPorts: portStrings(p.HostPorts), Publish: portStrings(p.Publish),
		},
		Start:       start,
		LauncherPID: os.Getpid(),
		UID:         os.Getuid(),
		Host:        host,
	}}
}

// Begin opens the shadow repository and records the start state, before the
// command starts. w is the audit baseline's walk of the working tree (nil: none),
// from which the Recorder takes what changed since the last record instead of
// sweeping the tree again.
func (r *Recorder) Begin(cfg *Config, w *treewalk.Walk) {
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

// Finish records the end state with the session's outcome.
func (r *Recorder) Finish(cfg *Config, out *Outcome) {
	if r == nil {
		return
	}
	r.Begin(cfg, nil) // a launch that stopped before the command: start is end
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
	rec.Snapshot = out.Snapshot
	rec.AuditFindings = out.AuditFindings
	rec.Notes = append(rec.Notes, out.Notes...)
	rec.NetRefusals = out.NetRefusals
	rec.SSHAgent = out.SSHAgent
	rec.Usage = out.Usage
	rec.Ports = out.Ports
	if err := r.sess.FinishWalk(rec, out.Walk); err != nil {
		warnRecord(cfg, "session not recorded: %v", err)
	}
}

// Checkpoint records the working tree as the session's next step, from w (nil:
// the recorder sweeps), reading at most budget bytes of file content.
func (r *Recorder) Checkpoint(msg string, w *treewalk.Walk, budget int64) (shadow.Step, error) {
	if r == nil || r.sess == nil {
		return shadow.Step{}, errors.New("the session is not recorded")
	}
	return r.sess.Checkpoint(msg, w, budget)
}

// warnRecord reports a recording failure on one line; the session goes on.
func warnRecord(cfg *Config, format string, args ...any) {
	w := cfg.Stderr
	if w == nil {
		w = os.Stderr
	}
	fmt.Fprintf(w, "agentbox: warning: "+format+" (--no-record skips recording)\n", args...)
}

// ID is the record's id, the session's name (AGENTBOX_SESSION); "" without a record.
func (r *Recorder) ID() string {
	if r == nil {
		return ""
	}
	return r.base.ID
}

// Config is what the snapshot and the record need of the session.
type Config struct {
	Stderr   io.Writer
	Args     []string // the exec arguments as given
	Version  string   // agentbox's version
	NoRecord bool
	GitSave  GitSaveConfig
}

// Outcome is what a session produced, for the audit and the shadow record.
type Outcome struct {
	Start, End     time.Time
	Backend        string // the backend that ran
	BackendVersion string // e.g. "bubblewrap 0.12.0"; agentbox's own for native
	Status         int    // exit status of agentbox exec
	// Signal is the signal that killed the command (0: it exited); Terminal: a
	// terminal session (backend.Result.Terminal). In a terminal session killed by a
	// signal, agentbox ends by the same signal (Exit).
	Signal        syscall.Signal
	Terminal      bool
	Left          int             // processes left running when the command ended, killed by the init
	Err           error           // agentbox's own failure, nil when the command ran
	Phases        []backend.Phase // per-phase setup timings
	Snapshot      string          // the P8 snapshot, "" when none
	AuditFindings []string        // one line per audit finding
	Notes         []string        // what host-side work skipped or could not do, for the record

	// NetRefusals are what the --allow-net proxy refused.
	NetRefusals []shadow.NetRefusal
	// SSHAgent are the requests the --ssh-agent filter decided on.
	SSHAgent []shadow.SSHAgentEvent
	// Ports are the --host-port and --publish forwardings and what they relayed.
	Ports []shadow.PortForward
	// Prestarted: the init was started ahead (backend.Result.Prestarted);
	// InitPeakRSSKiB: the init's own peak memory, 0 when not reported.
	Prestarted     bool
	InitPeakRSSKiB int64
	// Usage is what the session's processes used (session/limits.go).
	Usage *shadow.Usage

	// Walk is the audit's end walk of the working tree, which the record reuses;
	// nil when there is none or it cannot stand for the tree (the audit moved
	// findings away after it).
	Walk *treewalk.Walk
}

// portStrings spells forwardings as the flags take them, PORT:HOSTPORT.
func portStrings(ms []policy.PortMap) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.String())
	}
	return out
}
