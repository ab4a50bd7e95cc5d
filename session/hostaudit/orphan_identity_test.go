package hostaudit

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/gitguard/audit"
	"github.com/agentbox/agentbox/policy"
)

// TestOrphanByIdentityNeedsBirthTime: a killed launcher's journal names a
// repository that was removed since; on a filesystem that keeps no birth time its
// inode number went to a new repository made elsewhere, whose own config runs the
// user's monitor. A launch in the new repository does not take the journal for its
// own by device and inode alone: the new repository's config is not moved aside as a
// plant, the audit is not run, and a line says why and what to do.
func TestOrphanByIdentityNeedsBirthTime(t *testing.T) {
	top, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(top, "state")
	gone := filepath.Join(top, "gone")
	if err := os.MkdirAll(filepath.Join(gone, ".git/hooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cfg := &Config{Stderr: &stderr, NoRecord: true}
	a, err := Start(cfg, &policy.Policy{Repo: gone, StateDir: state}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.journal.Close() // the launcher is killed
	a.held.Close()
	if err := os.RemoveAll(gone); err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join(top, "repo")
	if err := os.MkdirAll(filepath.Join(repo, ".git/hooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(repo, ".git/config")
	writeTestFile(t, config, "[core]\n\tfsmonitor = the-users-own-monitor\n")
	// The journal as such a filesystem leaves it: the removed directory's device
	// and inode, now the new repository's, and no birth time.
	h, err := audit.Hold(repo)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(a.journalPath)
	if err != nil {
		t.Fatal(err)
	}
	j, err := decodeJournal(b)
	if err != nil {
		t.Fatal(err)
	}
	j.IDs[gone] = audit.DirID{Dev: h.Dev, Ino: h.Ino}
	h.Close()
	if err := os.WriteFile(a.journalPath, encodeJournal(j), 0o600); err != nil {
		t.Fatal(err)
	}
	Orphans(cfg, &policy.Policy{Repo: repo, StateDir: state})
	if b, err := os.ReadFile(config); err != nil || !strings.Contains(string(b), "the-users-own-monitor") {
		t.Errorf("the new repository's own config was taken for a plant of the removed one's session (%v):\n%s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), "audited now") || !strings.Contains(stderr.String(), "no birth time") {
		t.Errorf("want the audit not run, and a line saying why:\n%s", stderr.String())
	}
}
