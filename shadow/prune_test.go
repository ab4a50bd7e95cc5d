package shadow

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestPruneOldSessionsAndGoneRepos: agentbox gc's part in the shadow store. A dry run
// lists and removes nothing; then sessions older than the limit go (and the objects
// only they used), newer ones stay, the store of a removed repository whose sessions
// are all old goes, and that of one moved away with a newer session stays.
func TestPruneOldSessionsAndGoneRepos(t *testing.T) {
	repo := newRepo(t, map[string]string{"a.txt": "a\n"})
	s, state := openStore(t, repo)
	then := time.Now().Add(-48 * time.Hour)
	rec := Record{Command: []string{"true"}, Start: then}
	ss, err := s.Begin(rec)
	if err != nil {
		t.Fatal(err)
	}
	write(t, repo+"/big.txt", strings.Repeat("only in the old session\n", 1000))
	rec.End = then.Add(time.Minute)
	if err := ss.Finish(rec); err != nil {
		t.Fatal(err)
	}
	old := ss.ID()
	os.Remove(repo + "/big.txt")
	recent := record(t, s, Record{Command: []string{"true"}}, nil)

	gone := newRepo(t, map[string]string{"b.txt": "b\n"})
	g, err := Open(state, gone)
	if err != nil {
		t.Fatal(err)
	}
	gs, err := g.Begin(Record{Command: []string{"true"}, Start: then})
	if err != nil {
		t.Fatal(err)
	}
	if err := gs.Finish(Record{Command: []string{"true"}, Start: then, End: then.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(gone)
	// A repository moved away (by a session of the one around it, say) with a
	// session within the age keeps its records.
	moved := newRepo(t, map[string]string{"c.txt": "c\n"})
	m, err := Open(state, moved)
	if err != nil {
		t.Fatal(err)
	}
	kept := record(t, m, Record{Command: []string{"true"}}, nil)
	if err := os.Rename(moved, moved+".moved"); err != nil {
		t.Fatal(err)
	}

	if got, err := Prune(PruneOptions{StateDir: state}); err != nil || len(got) != 2 || !got[0].GoneKept || !got[1].GoneKept {
		t.Fatalf("prune with no age: %+v, %v; want both gone repositories kept", got, err)
	}
	opts := PruneOptions{StateDir: state, OlderThan: 24 * time.Hour, DryRun: true}
	got, err := Prune(opts)
	if err != nil || len(got) != 3 {
		t.Fatalf("dry run: %+v, %v; want three entries", got, err)
	}
	for _, p := range got {
		if p.Removed || p.Err != nil || p.GoneKept != (p.Repo == moved) {
			t.Errorf("dry run: %+v", p)
		}
	}
	if _, err := os.Stat(g.Dir); err != nil {
		t.Fatal("the dry run removed the store of the gone repository")
	}
	opts.DryRun = false
	if got, err = Prune(opts); err != nil || len(got) != 3 {
		t.Fatalf("prune: %+v, %v", got, err)
	}
	for _, p := range got {
		if p.Removed == (p.Repo == moved) || p.Err != nil {
			t.Errorf("prune: %+v", p)
		}
		if p.Repo == repo && !strings.Contains(p.What, "1 sessions older than") {
			t.Errorf("prune of %s: %q", repo, p.What)
		}
	}
	if _, err := os.Stat(g.Dir); err == nil {
		t.Error("the store of the gone repository is still there")
	}
	os.Rename(moved+".moved", moved)
	if recs, err := m.Sessions(); err != nil || len(recs) != 1 || recs[0].ID != kept {
		t.Errorf("the moved repository's sessions, moved back: %+v, %v; want %s", recs, err, kept)
	}
	recs, err := s.Sessions()
	if err != nil || len(recs) != 1 || recs[0].ID != recent {
		t.Errorf("sessions after prune: %+v, %v; want only %s (not %s)", recs, err, recent, old)
	}
	if out := shadowGit(t, s, "rev-list", "--all", "--objects"); strings.Contains(out, "big.txt") {
		t.Error("the old session's objects are still reachable")
	}
}
