package shadow

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/gitguard/audit"
)

// TestCheckpointSteps: checkpoints are numbered steps between a session's start
// and end, each holding the tree as it was, with what changed since the step
// before; an undo planned from a step puts back what changed after it; a
// checkpoint once the end is being recorded is refused; pruning the session
// removes its steps too.
func TestCheckpointSteps(t *testing.T) {
	repo := newRepo(t, map[string]string{"a": "1\n", "b": "b\n"})
	s, state := openStore(t, repo)
	ss, err := s.BeginWalk(Record{Start: time.Now()}, walkOf(t, repo))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(repo, "a"), "2\n")
	st1, err := ss.Checkpoint("one\x00\x1b[2J", walkOf(t, repo), 0)
	if err != nil || st1.N != 1 || st1.Files != (Files{Changed: 1}) || st1.Message != "one??[2J" {
		t.Fatalf("step 1: %+v, %v", st1, err)
	}
	st2, err := ss.Checkpoint("", nil, 0) // no walk: the recorder sweeps
	if err != nil || st2.N != 2 || st2.Files != (Files{}) {
		t.Fatalf("step 2 (nothing changed): %+v, %v", st2, err)
	}
	os.Remove(filepath.Join(repo, "b"))
	write(t, filepath.Join(repo, "c"), "c\n")
	write(t, filepath.Join(repo, "a"), "3\n")
	rec := Record{End: time.Now(), Command: []string{"x"}}
	if err := ss.FinishWalk(rec, walkOf(t, repo)); err != nil {
		t.Fatal(err)
	}
	if _, err := ss.Checkpoint("late", nil, 0); !errors.Is(err, ErrSessionEnded) {
		t.Fatalf("a checkpoint after the end: %v", err)
	}
	done := onlySession(t, s)
	steps, err := s.Steps(done)
	if err != nil || len(steps) != 2 || steps[0].Commit != st1.Commit || steps[1].N != 2 {
		t.Fatalf("steps: %+v, %v", steps, err)
	}
	at1, _, err := s.AtStep(done, 1)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := s.PlanUndo(at1, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range plan.Changes {
		got = append(got, c.Path)
	}
	if strings.Join(got, " ") != "a b c" || len(plan.Changed) != 0 {
		t.Fatalf("undo to step 1 would put back %v, stopped by %v", got, plan.Changed)
	}
	if _, _, err := s.AtStep(done, 3); err == nil {
		t.Fatal("step 3 of a session with 2 found")
	}
	if _, err := Prune(PruneOptions{StateDir: state, OlderThan: time.Nanosecond, Now: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if refs := shadowGit(t, s, "for-each-ref"); refs != "" {
		t.Fatalf("refs left after pruning the session: %s", refs)
	}
}

// TestCheckpointFromTheWatch: a checkpoint's walk taken from the launch's watch
// (audit.Launch.Peek) holds what changed since launch, and leaves the launch's
// listings to the end scan, which still sees every change.
func TestCheckpointFromTheWatch(t *testing.T) {
	repo := newRepo(t, map[string]string{"a": "1\n", "d/x": "x\n", "e/y": "y\n"})
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, nil) // the first record opens every file
	base, err := audit.Scan(repo, audit.ScanOptions{Walk: true, Watch: true})
	if err != nil {
		t.Fatal(err)
	}
	if base.Launch == nil {
		t.Skip("no watch on this kernel: the checkpoint walks the whole tree")
	}
	defer base.Launch.Close()
	ss, err := s.BeginWalk(Record{Start: time.Now()}, base.Walk)
	if err != nil {
		t.Fatal(err)
	}
	peek := func() *audit.Surface {
		cur, err := audit.Scan(repo, audit.ScanOptions{Walk: true, Since: base.Launch.Peek()})
		if err != nil || !cur.Walk.Complete {
			t.Fatalf("checkpoint scan: %v", err)
		}
		return cur
	}
	cur := peek()
	if st, err := ss.Checkpoint("still", cur.Walk, 0); err != nil || st.Files != (Files{}) || cur.Taken() == 0 {
		t.Fatalf("unchanged checkpoint: %+v %v, %d listings taken", st, err, cur.Taken())
	}
	write(t, filepath.Join(repo, "d/x"), "x2\n")
	cur = peek()
	if st, err := ss.Checkpoint("edit", cur.Walk, 0); err != nil || st.Files != (Files{Changed: 1}) {
		t.Fatalf("checkpoint after an edit: %+v %v", st, err)
	}
	write(t, filepath.Join(repo, "e/y"), "y2\n")
	base.Launch.Stop()
	end, err := audit.Scan(repo, audit.ScanOptions{Walk: true, Since: base.Launch})
	if err != nil {
		t.Fatal(err)
	}
	if err := ss.FinishWalk(Record{End: time.Now()}, end.Walk); err != nil {
		t.Fatal(err)
	}
	var done Record
	recs, _ := s.Sessions()
	for _, r := range recs {
		if r.ID == ss.ID() {
			done = r
		}
	}
	if done.Files != (Files{Changed: 2}) {
		t.Fatalf("the end counts %+v, want the two edits", done.Files)
	}
	steps, _ := s.Steps(done)
	if len(steps) != 2 || shadowGit(t, s, "show", steps[1].Commit+":d/x") != "x2" || shadowGit(t, s, "show", steps[1].Commit+":e/y") != "y" {
		t.Fatalf("step 2 does not hold the tree as it was: %+v", steps)
	}
}
