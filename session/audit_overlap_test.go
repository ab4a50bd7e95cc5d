package session

import (
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/gitguard/audit"
	"github.com/agentbox/agentbox/internal/testenv"
)

// TestOverlapsOtherSession: a pending session of a directory inside the
// repository, or of one holding it, keeps this launch from trusting its watch
// (audit_shared.go); one of an unrelated repository, or of the same one, does not.
func TestOverlapsOtherSession(t *testing.T) {
	state := testenv.CanonTempDir(t)
	repo := "/home/u/src/proj"
	if overlapsOtherSession(state, repo) {
		t.Fatal("no pending session, and an overlap")
	}
	pending := func(other string) func() {
		a := &auditor{repo: other, id: "x", base: &audit.Surface{Repo: other, Items: map[string]*audit.Item{}}}
		f, name, err := writeJournal(state, a)
		if err != nil {
			t.Fatal(err)
		}
		return func() { a.journal, a.journalPath = f, name; a.drop() }
	}
	for _, c := range []struct {
		other string
		want  bool
	}{
		{repo, false}, // the same repository: its baseline is inherited instead
		{"/home/u/src/other", false},
		{"/home/u/src/proj2", false},
		{filepath.Join(repo, "sub"), true},
		{"/home/u/src", true},
	} {
		done := pending(c.other)
		if got := overlapsOtherSession(state, repo); got != c.want {
			t.Errorf("pending session of %s: overlap %v, want %v", c.other, got, c.want)
		}
		done()
	}
}
