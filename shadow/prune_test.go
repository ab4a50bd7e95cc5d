package shadow

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestPruneOldSessionsAndGoneRepos: agentbox gc's part in the shadow store. A dry run
// lists and removes nothing; then sessions older than the limit go (and the objects
// only they used), newer ones stay, and the store of a removed repository goes.
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
	record(t, g, Record{Command: []string{"true"}}, nil)
	os.RemoveAll(gone)

	opts := PruneOptions{StateDir: state, OlderThan: 24 * time.Hour, DryRun: true}
	got, err := Prune(opts)
	if err != nil || len(got) != 2 {
		t.Fatalf("dry run: %+v, %v; want two entries", got, err)
	}
	for _, p := range got {
		if p.Removed || p.Err != nil {
			t.Errorf("dry run: %+v", p)
		}
	}
	if _, err := os.Stat(g.Dir); err != nil {
		t.Fatal("the dry run removed the store of the gone repository")
	}
	opts.DryRun = false
	if got, err = Prune(opts); err != nil || len(got) != 2 {
		t.Fatalf("prune: %+v, %v", got, err)
	}
	for _, p := range got {
		if !p.Removed || p.Err != nil {
			t.Errorf("prune: %+v", p)
		}
		if p.Repo == repo && !strings.Contains(p.What, "1 sessions older than") {
			t.Errorf("prune of %s: %q", repo, p.What)
		}
	}
	if _, err := os.Stat(g.Dir); err == nil {
		t.Error("the store of the gone repository is still there")
	}
	recs, err := s.Sessions()
	if err != nil || len(recs) != 1 || recs[0].ID != recent {
		t.Errorf("sessions after prune: %+v, %v; want only %s (not %s)", recs, err, recent, old)
	}
	if out := shadowGit(t, s, "rev-list", "--all", "--objects"); strings.Contains(out, "big.txt") {
		t.Error("the old session's objects are still reachable")
	}
}
