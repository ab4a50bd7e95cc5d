package session

import (
	"time"

	"github.com/agentbox/agentbox/backend"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/session/hostaudit"
	"github.com/agentbox/agentbox/session/record"
)

// prelaunch is the host work the command waits for and the sandbox does not: the
// audit's baseline (whose walk the record's start takes), the --add-dir audits'
// baselines, the record's start state and the metadata snapshot. It starts once the
// plan is built and rechecked, and runs beside the launcher's remaining steps (the
// kept paths' audit start, the session's cgroup, the network service, the clone)
// and the sandbox's setup; the backend waits for it before the command starts
// (backend.Options.BeforeExec). Started at BeforeExec instead, it made a small
// repository's launch wait for it after the sandbox was built (docs/performance.md,
// target 3). Started earlier, before the recheck, a launch the recheck refuses
// would still have snapshotted what a concurrent session pointed .git at, and
// applied retention with it (TestRefusedLaunchTakesNoSnapshot).
//
// Nothing in it depends on the steps beside it. What it finds out is written to its
// own fields and handed to the session's Outcome by wait, on the launcher's
// goroutine.
type prelaunch struct {
	done   chan struct{}
	err    error
	aud    *hostaudit.Auditor
	dirs   *hostaudit.Dirs
	snap   string   // the snapshot record
	notes  []string // what the snapshot left out
	phases []backend.Phase
	handed bool // wait gave the results to an Outcome
}

// startPrelaunch starts the work; every caller waits for it (wait) before it
// returns, whatever happens to the launch.
func startPrelaunch(cfg *Config, p *policy.Policy, rec *record.Recorder, gitDirs []string) *prelaunch {
	pl := &prelaunch{done: make(chan struct{})}
	go func() {
		defer close(pl.done)
		pl.err = pl.run(cfg, p, rec, gitDirs)
	}()
	return pl
}

func (pl *prelaunch) run(cfg *Config, p *policy.Policy, rec *record.Recorder, gitDirs []string) (err error) {
	t := time.Now()
	mark := func(step string) {
		now := time.Now()
		pl.phases = append(pl.phases, backend.Phase{Name: DuringSetupPrefix + step, Dur: now.Sub(t)})
		t = now
	}
	if p.ReadOnly {
		rec.Begin(cfg.record(), nil)
		mark("record start")
		return nil // prepare/readonly.go: nothing to audit or snapshot
	}
	if cfg.NoAudit {
		rec.Begin(cfg.record(), nil)
		mark("record start")
		pl.snap, pl.notes, err = record.Snapshot(cfg.record(), p)
		mark("snapshot")
		return err
	}
	// The snapshot reads .git and writes only the store; the baseline reads the
	// working tree and writes its journal: they run side by side. Every return
	// below waits for the snapshot first, so none of it runs on after a failure.
	snapped := make(chan error, 1)
	go func() {
		var err error
		pl.snap, pl.notes, err = record.Snapshot(cfg.record(), p)
		snapped <- err
	}()
	a, err := hostaudit.Start(cfg.audit(), p, gitDirs)
	if err != nil {
		<-snapped
		return err
	}
	pl.aud = a
	if pl.dirs, err = hostaudit.StartDirs(cfg.audit(), p); err != nil {
		<-snapped
		return err
	}
	mark("audit baseline")
	// From the baseline's walk: the recorder walks nothing itself.
	rec.Begin(cfg.record(), a.BaseWalk())
	mark("record start")
	if err := <-snapped; err != nil {
		return err
	}
	mark("snapshot") // what was left of it once the baseline was done
	return nil
}

// wait waits for the work to end, hands its results to out (once) and returns the
// error that must stop the launch, if any.
func (pl *prelaunch) wait(out *Outcome) error {
	<-pl.done
	if !pl.handed {
		pl.handed = true
		out.Snapshot = pl.snap
		out.Notes = append(out.Notes, pl.notes...)
	}
	return pl.err
}
