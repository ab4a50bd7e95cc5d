package hostaudit

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/gitguard/audit"
	"github.com/agentbox/agentbox/policy"
)

// A journal is left alone while its launcher holds it, and audited, then removed,
// once the launcher is gone (its lock with it).
func TestJournalLockedWhileLauncherLives(t *testing.T) {
	repo, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := &policy.Policy{Repo: repo, StateDir: t.TempDir()}
	base, err := audit.Scan(repo, audit.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := &Auditor{repo: repo, id: audit.NewAuditID(), base: base}
	if a.journal, a.journalPath, err = writeJournal(p.StateDir, a); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cfg := &Config{Stderr: &stderr}
	Orphans(cfg, p)
	if _, err := os.Stat(a.journalPath); err != nil || stderr.Len() != 0 {
		t.Fatalf("the journal of a live launcher was taken: %v, %q", err, stderr.String())
	}
	a.journal.Close() // the launcher dies: its lock goes, its journal stays
	Orphans(cfg, p)
	if _, err := os.Stat(a.journalPath); !os.IsNotExist(err) || !strings.Contains(stderr.String(), "killed before its audit") {
		t.Errorf("the journal of a dead launcher was not audited: %v, %q", err, stderr.String())
	}
}

// A state directory inside the repository would let the sandbox plant journals: it is
// refused, as for the shadow store.
func TestJournalDirRefusedInsideRepo(t *testing.T) {
	repo, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := journalDir(filepath.Join(repo, ".state"), repo); err == nil {
		t.Error("a state directory inside the repository was accepted")
	}
	if _, err := journalDir(t.TempDir(), repo); err != nil {
		t.Errorf("a state directory outside the repository: %v", err)
	}
}

// A launch whose audit baseline cannot take the repository's audit lock (an undo
// holds it) is refused, instead of starting beside the undo; an audit at the end of
// a session still runs without it.
func TestStartRefusedWhileUndoHoldsRepo(t *testing.T) {
	repo, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := &policy.Policy{Repo: repo, StateDir: t.TempDir()}
	release, err := HoldRepo(p.StateDir, repo)
	if err != nil {
		t.Fatal(err)
	}
	startRefusedWhileHeld(t, p, release, "holds this repository")
}

// startRefusedWhileHeld: Start is refused, saying why (want), while a lock it needs
// is held, and starts once release has let it go.
func startRefusedWhileHeld(t *testing.T, p *policy.Policy, release func(), want string) {
	t.Helper()
	defer release()
	defer func(d time.Duration) { auditLockWait = d }(auditLockWait)
	auditLockWait = 300 * time.Millisecond
	var stderr bytes.Buffer
	a, err := Start(&Config{Stderr: &stderr, NoRecord: true}, p, nil)
	if err == nil {
		a.journal.Close()
		t.Fatalf("Start went on while the lock was held (stderr %q)", stderr.String())
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("refusal does not say why (want %q): %v", want, err)
	}
	release()
	if a, err = Start(&Config{Stderr: &stderr, NoRecord: true}, p, nil); err != nil {
		t.Fatalf("Start after the lock was let go: %v", err)
	}
	a.journal.Close()
}

// A finding left in place counts as unresolved: the session fails instead of
// ending as if audited. A repository moved away is audited where it lies now.
func TestFinishCountsUnresolved(t *testing.T) {
	top, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join(top, "repo")
	if err := os.Mkdir(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	p := &policy.Policy{Repo: repo, StateDir: t.TempDir()}
	var stderr bytes.Buffer
	cfg := &Config{Stderr: &stderr, NoRecord: true}
	a, err := Start(cfg, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out Outcome
	a.Finish(cfg, &out)
	if out.Unresolved != 0 {
		t.Fatalf("a clean repository: %d unresolved: %s", out.Unresolved, stderr.String())
	}
	if a, err = Start(cfg, p, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(repo, repo+".moved"); err != nil {
		t.Fatal(err)
	}
	a.Finish(cfg, &out)
	// Moved away: audited where it lies now, through the descriptor held since
	// the launch (gitguard/audit/audit_held_linux.go), and said.
	if out.Unresolved != 0 || !strings.Contains(stderr.String(), "was moved during the session to "+repo+".moved") {
		t.Errorf("a repository moved away: %d unresolved: %s", out.Unresolved, stderr.String())
	}
}

// TestHoldRepoNamesTheRunningLauncher: undo's refusal names the running session's
// launcher PID, read from its journal's name HASH-PID-N.journal; two sessions of
// one process have two journals, and it names the PID once for each.
func TestHoldRepoNamesTheRunningLauncher(t *testing.T) {
	repo, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := &policy.Policy{Repo: repo, StateDir: t.TempDir()}
	var stderr bytes.Buffer
	for range 2 {
		a, err := Start(&Config{Stderr: &stderr, NoRecord: true}, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer a.journal.Close()
	}
	ents, _ := os.ReadDir(filepath.Join(p.StateDir, "audit-pending"))
	if len(ents) != 2 {
		t.Errorf("two sessions of one process left %d journals, want 2", len(ents))
	}
	release, err := HoldRepo(p.StateDir, repo)
	if err == nil {
		release()
		t.Fatal("HoldRepo went on while two sessions ran")
	}
	pid := strconv.Itoa(os.Getpid())
	if want := "launcher PID " + pid + ", " + pid + ")"; !strings.Contains(err.Error(), want) {
		t.Errorf("refusal %q does not name the launcher (want %q)", err, want)
	}
}
