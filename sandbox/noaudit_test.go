package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoAuditSessionLeavesTheNextItsBaseline: a Go API session with NoAudit still
// keeps its pending-audit journal while it runs, so a session that starts beside it
// inherits the tree as it was before either ran, and its audit finds what the
// NoAudit session planted before it started (on main that plant was in the second
// session's baseline, taken for the user's own).
func TestNoAuditSessionLeavesTheNextItsBaseline(t *testing.T) {
	if !asTestUser(t) {
		return
	}
	repo := newRepo(t)
	plant := filepath.Join(repo, "sub", ".git", "config")
	end := plantingSession(t, repo, "the NoAudit session", Options{Repo: repo, Dir: repo, NoAudit: true, NoRecord: true})
	res, err := Run(Options{Command: []string{"true"}, Repo: repo, Dir: repo, NoRecord: true, Log: &strings.Builder{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := end(); err != nil {
		t.Fatal(err)
	}
	if !foundPlant(res.AuditFindings) {
		t.Errorf("the second session's audit found %q, want the nested repository's config the NoAudit session planted", res.AuditFindings)
	}
	if _, err := os.Lstat(plant); err == nil {
		t.Error("the plant is still in the repository")
	}
}
