package session

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/session/prepare"
	"github.com/agentbox/agentbox/session/record"
)

// prelaunchRepo is a Git repository with a state and a snapshot directory beside it.
func prelaunchRepo(t *testing.T) (*Config, *policy.Policy, mounts.FileID, string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("needs git")
	}
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	if out, err := exec.Command("git", "init", "-q", repo).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(repo, "f"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	snaps := filepath.Join(dir, "snaps")
	p := &policy.Policy{Repo: repo, Workdir: repo, StateDir: filepath.Join(dir, "state"), Command: []string{"true"}}
	cfg := &Config{Policy: p, Stderr: io.Discard, GitSave: record.GitSaveConfig{Dir: snaps}}
	id, err := prepare.Identify(repo)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, p, id, snaps
}

// TestPrelaunchSnapshotsOnlyOnceCleared: the audit's baseline starts before the
// recheck, the snapshot and the record's start only after it passed. A launch
// stopped before (clear(false)) has a baseline, to drop, and no snapshot or record.
func TestPrelaunchSnapshotsOnlyOnceCleared(t *testing.T) {
	for _, cleared := range []bool{false, true} {
		cfg, p, id, snaps := prelaunchRepo(t)
		rec := record.Start(cfg.record(), p, time.Now())
		pre := startPrelaunch(cfg, p, rec, nil, id)
		// The baseline does not wait for the recheck: its journal appears.
		journals := func() []string {
			j, _ := filepath.Glob(filepath.Join(p.StateDir, "audit-pending", "*"))
			return j
		}
		for deadline := time.Now().Add(30 * time.Second); len(journals()) == 0; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the audit baseline waited for the recheck")
			}
		}
		pre.clear(cleared)
		var out Outcome
		err := pre.wait(&out)
		if pre.aud == nil {
			t.Fatalf("cleared %v: no audit baseline", cleared)
		}
		pre.aud.Drop()
		taken, _ := filepath.Glob(filepath.Join(snaps, "*", "snaps", "*.snap"))
		recorded, _ := filepath.Glob(filepath.Join(p.StateDir, "shadow", "*.git"))
		switch {
		case cleared && (err != nil || out.Snapshot == "" || len(taken) == 0):
			t.Errorf("cleared: err %v, snapshot %q, %d taken; want a snapshot", err, out.Snapshot, len(taken))
		case !cleared && (err != errNotCleared || out.Snapshot != "" || len(taken) != 0):
			t.Errorf("stopped before the recheck: err %v, snapshot %q, %d taken; want none", err, out.Snapshot, len(taken))
		case !cleared && len(recorded) != 0:
			t.Errorf("stopped before the recheck: recorded into %q", recorded)
		case cleared && len(recorded) == 0:
			t.Error("cleared: no record")
		}
		// The record's start state is committed in the background; every launch
		// ends its record (RunSession), which waits for it, before it returns.
		rec.Finish(cfg.record(), &Outcome{})
	}
}

// TestPrelaunchRefusesSwappedRepo: a directory swapped in at the repository's path
// before the baseline, and left there, fails the launch instead of standing for the
// baseline of the repository the plan binds.
func TestPrelaunchRefusesSwappedRepo(t *testing.T) {
	cfg, p, _, _ := prelaunchRepo(t)
	other, err := prepare.Identify(t.TempDir()) // the identity the launch planned for
	if err != nil {
		t.Fatal(err)
	}
	pre := startPrelaunch(cfg, p, nil, nil, other)
	pre.clear(true)
	err = pre.wait(&Outcome{})
	if pre.aud != nil {
		pre.aud.Drop()
	}
	if err == nil || !strings.Contains(err.Error(), "changed while agentbox was starting") {
		t.Fatalf("baseline of another directory than planned: %v; want the launch refused", err)
	}
}
