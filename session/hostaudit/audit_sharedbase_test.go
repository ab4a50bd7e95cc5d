package hostaudit

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/gitguard/audit"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/policy"
)

// TestSharedBaseFromOverlappingSession: a fresh baseline of the main worktree,
// taken while a linked worktree's session is pending, takes the common Git
// directory's items from that session's baseline — a plant there is dropped, an
// item the plant removed comes back — and keeps its own elsewhere; the oldest
// overlapping session has the last word, and an unrelated one changes nothing.
func TestSharedBaseFromOverlappingSession(t *testing.T) {
	state := testenv.CanonTempDir(t)
	const repo, common = "/home/u/r", "/home/u/r/.git"
	item := func(p, sum string) *audit.Item { return &audit.Item{Path: p, Kind: audit.KindConfig, Sum: sum} }
	pending := func(other string, gitDirs []string, items ...*audit.Item) {
		base := &audit.Surface{Repo: other, Items: map[string]*audit.Item{}}
		for _, it := range items {
			base.Items[it.Path] = it
		}
		a := &Auditor{repo: other, id: "x", base: base, opt: audit.ScanOptions{GitDirs: gitDirs}}
		f, name, err := writeJournal(state, a)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.journal, a.journalPath = f, name; a.Drop() })
	}
	pending("/home/u/unrelated", nil, item("/home/u/r/.git/config", "unrelated"))
	pending(repo, nil, item(common+"/config", "same repository: inherited, not merged"))
	pending("/home/u/w1", []string{"/home/u/r/.git/worktrees/w1", common},
		item(common+"/config", "c0"), item(common+"/modules/y/config", "y0"))
	base := &audit.Surface{Repo: repo, Items: map[string]*audit.Item{
		repo + "/.gitmodules":        item(repo+"/.gitmodules", "g1"),
		common + "/config":           item(common+"/config", "c0"),
		common + "/modules/x/config": item(common+"/modules/x/config", "plant"),
	}}
	js := overlappingJournals(readPending(state, repo), state, repo, []string{repo})
	if len(js) != 1 {
		t.Fatalf("overlapping journals: %d, want 1 (the linked worktree's)", len(js))
	}
	takeShared(base, []string{repo}, js)
	want := map[string]string{repo + "/.gitmodules": "g1", common + "/config": "c0", common + "/modules/y/config": "y0"}
	if len(base.Items) != len(want) {
		t.Errorf("baseline items %d, want %d: %v", len(base.Items), len(want), base.Items)
	}
	for p, sum := range want {
		if it := base.Items[p]; it == nil || it.Sum != sum {
			t.Errorf("baseline %s: %+v, want sum %s", p, it, sum)
		}
	}
	// Two overlapping sessions: the older one's items win.
	t0 := time.Now()
	older := &auditJournal{Repo: "/home/u/w2", Start: t0, Options: audit.ScanOptions{GitDirs: []string{common}},
		Base: &audit.Surface{Items: map[string]*audit.Item{common + "/config": item(common+"/config", "old")}}}
	newer := &auditJournal{Repo: "/home/u/w3", Start: t0.Add(time.Hour), Options: audit.ScanOptions{GitDirs: []string{common}},
		Base: &audit.Surface{Items: map[string]*audit.Item{common + "/config": item(common+"/config", "new")}}}
	takeShared(base, []string{repo}, map[string]*auditJournal{"a": older, "b": newer})
	if got := base.Items[common+"/config"].Sum; got != "old" {
		t.Errorf("two overlapping sessions: the shared item is %q, want the oldest session's", got)
	}
}

// TestBaselineWaitsForWorktreeAudit: the baseline of a main worktree waits for the
// audit lock of its .git directory, which a linked worktree's session takes for its
// own baseline and audit (its common dir): an audit moving files there, or a
// journal being written, is never half seen.
func TestBaselineWaitsForWorktreeAudit(t *testing.T) {
	repo, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(repo, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := &policy.Policy{Repo: repo, StateDir: t.TempDir()}
	// The linked worktree's audit: its Git dirs hold repo/.git.
	release, err := takeSharedLocks(p.StateDir, sharedLockKeys("/elsewhere/wt", []string{filepath.Join(repo, ".git")}))
	if err != nil {
		t.Fatal(err)
	}
	startRefusedWhileHeld(t, p, release, "holds its Git directory")
}

// TestOrphanOfLinkedWorktreeAuditedFromMain: a linked worktree's launcher killed
// before its audit left a plant in the common Git dir; the next launch in the main
// worktree runs that audit (the worktree may never be launched in again), and one
// in an unrelated repository leaves it alone.
func TestOrphanOfLinkedWorktreeAuditedFromMain(t *testing.T) {
	home, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	repo, wt, other := filepath.Join(home, "r"), filepath.Join(home, "wt"), filepath.Join(home, "other")
	common := filepath.Join(repo, ".git")
	for _, d := range []string{filepath.Join(common, "worktrees/wt"), wt, filepath.Join(other, ".git")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	state := t.TempDir()
	// The worktree's session: its baseline, then its launcher dies (the lock goes).
	a := &Auditor{repo: wt, id: "dead", base: &audit.Surface{Repo: wt, Items: map[string]*audit.Item{}},
		opt: audit.ScanOptions{GitDirs: []string{filepath.Join(common, "worktrees/wt"), common}}}
	f, journal, err := writeJournal(state, a)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	plant := filepath.Join(common, "modules/x/config")
	if err := os.MkdirAll(filepath.Dir(plant), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plant, []byte("[core]\n\tfsmonitor = touch /nonexistent/pwned\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	Orphans(&Config{Stderr: &stderr}, &policy.Policy{Repo: other, StateDir: state})
	if _, err := os.Stat(journal); err != nil || stderr.Len() > 0 {
		t.Fatalf("a launch in an unrelated repository touched the worktree's pending audit (%v): %s", err, stderr.String())
	}
	Orphans(&Config{Stderr: &stderr}, &policy.Policy{Repo: repo, StateDir: state})
	if _, err := os.Lstat(plant); err == nil {
		t.Errorf("the plant of the killed worktree session is still at %s:\n%s", plant, stderr.String())
	}
	if !strings.Contains(stderr.String(), "agentbox: audit: "+plant) {
		t.Errorf("the finding was not reported:\n%s", stderr.String())
	}
	if _, err := os.Stat(journal); err == nil {
		t.Errorf("the worktree's pending audit is still pending after it ran")
	}
}

// TestOtherRepositorysBaselineNotRead: a launch reads of another repository's
// pending journal only its header. A session whose repository holds 100,000 nested
// repositories left a 15 MB baseline, and every launch on the machine, of any
// repository, read and decoded it whole several times (0.8 s and 140 MB each).
// Measured in bytes allocated, not in time.
func TestOtherRepositorysBaselineNotRead(t *testing.T) {
	state := testenv.CanonTempDir(t)
	const big = "/home/u/big"
	base := &audit.Surface{Repo: big, Items: map[string]*audit.Item{}}
	for i := range 100_000 {
		p := fmt.Sprintf("%s/n/%d/.git/config", big, i)
		base.Items[p] = &audit.Item{Path: p, Kind: audit.KindConfig, Sum: strings.Repeat("0", 64)}
	}
	a := &Auditor{repo: big, id: "big", base: base}
	f, name, err := writeJournal(state, a)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { a.journal, a.journalPath = f, name; a.Drop() }()
	if fi, err := os.Stat(name); err != nil || fi.Size() < 10<<20 {
		t.Fatalf("the journal is not large: %v %v", fi, err)
	}
	const other = "/home/u/other"
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if inheritedBase(readPending(state, other), state, other, nil) != nil || overlapsOtherSession(readPending(state, other), other) || len(overlappingJournals(readPending(state, other), state, other, []string{other})) > 0 {
		t.Error("an unrelated repository's session taken for this one's")
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 4<<20 {
		t.Errorf("a launch of another repository allocated %d bytes for a pending journal that is not its own", n)
	}
	// Its own repository's launch still inherits it whole.
	if j := inheritedBase(readPending(state, big), state, big, nil); j == nil || len(j.Base.Items) != len(base.Items) {
		t.Errorf("the same repository's launch did not inherit the baseline")
	}
}
