package session

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentbox/agentbox/backend"
	"github.com/agentbox/agentbox/internal/stack"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/session/hostaudit"
	"github.com/agentbox/agentbox/session/prepare"
	"github.com/agentbox/agentbox/session/record"
)

// prelaunch is the host work the command waits for and the sandbox does not: the
// audit's baseline (whose walk the record's start takes), the --add-dir audits'
// baselines, the record's start state and the metadata snapshot. The baseline starts
// as soon as the placeholders exist (they are part of it), and runs beside the
// launcher's remaining steps (the push guard's staging, the recheck, the plan, the
// kept paths' audit start, the session's cgroup, the network service, the clone) and
// the sandbox's setup; the backend waits for it before the command starts
// (backend.Options.BeforeExec). Started at BeforeExec instead, it made a small
// repository's launch wait for it after the sandbox was built (docs/performance.md,
// target 3).
//
// The snapshot and the record's start wait for the recheck (clear): a launch the
// recheck refuses takes no snapshot, applies no retention and records nothing (a
// concurrent session could have pointed .git/commondir at a decoy that evicts every
// older snapshot; TestRefusedLaunchTakesNoSnapshot). The baseline only reads, and
// writes its journal, which a refused launch drops; it is taken of the repository
// the launch identified (repoIdentity): the repository is identified again once the
// baseline is done, so that a directory swapped in at its path before the baseline
// began, and left there, fails the launch instead of standing for its baseline.
//
// Nothing in it depends on the steps beside it. What it finds out is written to its
// own fields and handed to the session's Outcome by wait, on the launcher's
// goroutine.
type prelaunch struct {
	done    chan struct{}
	decided chan struct{} // closed by clear
	cleared bool          // the recheck passed: snapshot and record
	once    sync.Once
	err     error
	aud     *hostaudit.Auditor
	dirs    *hostaudit.Dirs
	snap    string   // the snapshot record
	notes   []string // what the snapshot left out
	phases  []backend.Phase
	handed  bool // wait gave the results to an Outcome
}

// startPrelaunch starts the work; every caller waits for it (wait) before it
// returns, whatever happens to the launch.
// repoID is the repository's identity as the launch planned for it.
func startPrelaunch(cfg *Config, p *policy.Policy, rec *record.Recorder, gitDirs []string, repoID mounts.FileID) *prelaunch {
	pl := &prelaunch{done: make(chan struct{}), decided: make(chan struct{})}
	go func() {
		// The audit's baseline (the Git config reads, the index's reading, the
		// walk) takes this goroutine past 8 KiB on every launch, bare ones too (7.1
		// KiB in use when it was copied from 8 to 16 KiB), and the record's start,
		// encoding/json's first use, needs 16: grown here, while shallow, instead of
		// copied through that chain.
		stack.To16K()
		defer close(pl.done)
		pl.err = pl.run(cfg, p, rec, gitDirs, repoID)
	}()
	return pl
}

// errNotCleared: the launch stopped before its recheck passed.
var errNotCleared = errors.New("the launch stopped before its recheck")

// clear says whether the launch passed its recheck (true) or stopped before it
// (false); only the first call counts. Every launch calls it, at the latest when it
// returns.
func (pl *prelaunch) clear(ok bool) {
	pl.once.Do(func() {
		pl.cleared = ok
		close(pl.decided)
	})
}

// waitClear waits for clear and says whether the launch passed its recheck.
func (pl *prelaunch) waitClear() bool {
	<-pl.decided
	return pl.cleared
}

func (pl *prelaunch) run(cfg *Config, p *policy.Policy, rec *record.Recorder, gitDirs []string, repoID mounts.FileID) (err error) {
	t := time.Now()
	mark := func(step string) {
		now := time.Now()
		pl.phases = append(pl.phases, backend.Phase{Name: DuringSetupPrefix + step, Dur: now.Sub(t)})
		t = now
	}
	// NoAudit skips the audit after the session, not its baseline and journal: a
	// session that starts meanwhile inherits that baseline, and undo sees this one
	// running (hostaudit/audit_shared.go).
	if p.ReadOnly {
		if !pl.waitClear() {
			return errNotCleared
		}
		rec.Begin(cfg.record(), nil)
		mark("record start")
		if p.ReadOnly {
			return nil // prepare/readonly.go: nothing to audit or snapshot
		}
		pl.snap, pl.notes, err = record.Snapshot(cfg.record(), p)
		mark("snapshot")
		return err
	}
	// The snapshot reads .git and writes only the store; the baseline reads the
	// working tree and writes its journal: they run side by side, once the recheck
	// has passed. Every return below waits for the snapshot first, so none of it
	// runs on after a failure.
	snapped := make(chan error, 1)
	go func() {
		if !cfg.GitSave.Disabled {
			stack.To16K() // the snapshot's Git lookups and its record's decoding need it
		}
		if !pl.waitClear() {
			snapped <- errNotCleared
			return
		}
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
	if id, err := prepare.Identify(p.Repo); err != nil || id != repoID || !a.Holds(repoID) {
		<-snapped
		return fmt.Errorf("repo %s changed while agentbox was starting (another directory is at its path after the audit baseline); not launching", p.Repo)
	}
	if dir := pl.dirs.Moved(); dir != "" {
		<-snapped
		return fmt.Errorf("--add-dir %s changed while agentbox was starting (another directory is at its path after the audit baseline); not launching", dir)
	}
	mark("audit baseline")
	if !pl.waitClear() {
		<-snapped
		return errNotCleared
	}
	t = time.Now() // the wait for the recheck is the launcher's, not this work's
	// From the baseline's walk: the recorder walks nothing itself.
	rec.Begin(cfg.record(), a.BaseWalk())
	mark("record start")
	if err := <-snapped; err != nil {
		return err
	}
	mark("snapshot") // what was left of it once the baseline was done
	return nil
}

// unbound says which added directory's or Git directory's audit does not read
// the directory the plan binds (ids), "" when each does: the end audit reads what
// it holds.
func (pl *prelaunch) unbound(ids map[string]mounts.FileID) error {
	if dir := pl.dirs.Unbound(ids); dir != "" {
		return fmt.Errorf("--add-dir %s changed while agentbox was starting (the audit holds another directory than the one bound); not launching", dir)
	}
	if dir := pl.aud.UnboundGitDir(ids); dir != "" {
		return fmt.Errorf("linked worktree Git directory %s changed while agentbox was starting (the audit holds another directory than the one bound); not launching", dir)
	}
	return nil
}

// ready is what the command starts after: the work ended without an error (wait),
// and the audit holds the directories the plan binds (unbound).
func (pl *prelaunch) ready(out *Outcome, ids map[string]mounts.FileID) error {
	if err := pl.wait(out); err != nil {
		return err
	}
	return pl.unbound(ids)
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
