package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	release := filepath.Join(repo, "release")
	t.Cleanup(func() { os.WriteFile(release, nil, 0o644) })
	first := make(chan error, 1)
	go func() {
		// Plants, then waits (at most a minute) until the test lets it end.
		script := `git init -q "$1/sub" && printf '[core]\n\tfsmonitor = touch /tmp/pwned\n' > "$1/sub/.git/config"; i=0; while [ ! -e "$1/release" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done`
		_, err := Run(Options{Command: []string{"/bin/sh", "-c", script, "sh", repo}, Repo: repo, Dir: repo, NoAudit: true, NoRecord: true})
		first <- err
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		// Its content, not the file: git init writes a plain config first.
		if b, err := os.ReadFile(plant); err == nil && strings.Contains(string(b), "fsmonitor") {
			break
		}
		select {
		case err := <-first:
			t.Fatalf("the NoAudit session ended before planting: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the NoAudit session never planted")
		}
		time.Sleep(20 * time.Millisecond)
	}
	res, err := Run(Options{Command: []string{"true"}, Repo: repo, Dir: repo, NoRecord: true, Log: &strings.Builder{}})
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(release, nil, 0o644)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range res.AuditFindings {
		found = found || strings.Contains(f, "sub/.git/config")
	}
	if !found {
		t.Errorf("the second session's audit found %q, want the nested repository's config the NoAudit session planted", res.AuditFindings)
	}
	if _, err := os.Lstat(plant); err == nil {
		t.Error("the plant is still in the repository")
	}
}
