package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMovedHomeSharesTheOperatorsPendingAudits: a Go API session whose Options.Home
// gives the command a HOME of its own keeps its pending-audit journal, audit locks
// and record where every other launch of the operator's looks (XDG_STATE_HOME, else
// the process's $HOME), not below the HOME it overlays. On main its state directory
// moved with Options.Home: a session started beside another one on the same
// repository saw no pending journal, took the other's plant for the user's own in
// its baseline, and its audit let it pass (and a killed launcher's session was left
// for launches that never look there).
func TestMovedHomeSharesTheOperatorsPendingAudits(t *testing.T) {
	if !asTestUser(t) {
		return
	}
	repo := newRepo(t)
	agentHome, err := os.MkdirTemp(os.Getenv("HOME"), "agent-home-")
	if err != nil {
		t.Fatal(err)
	}
	plant := filepath.Join(repo, "sub", ".git", "config")
	release := filepath.Join(repo, "release")
	t.Cleanup(func() { os.WriteFile(release, nil, 0o644) })
	first := make(chan error, 1)
	go func() {
		// Plants, then waits (at most a minute) until the test lets it end.
		script := `git init -q "$1/sub" && printf '[core]\n\tfsmonitor = touch /tmp/pwned\n' > "$1/sub/.git/config"; i=0; while [ ! -e "$1/release" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done`
		_, err := Run(Options{Command: []string{"/bin/sh", "-c", script, "sh", repo}, Repo: repo, Dir: repo, NoRecord: true, Log: &strings.Builder{}})
		first <- err
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Lstat(plant); err == nil {
			break
		}
		select {
		case err := <-first:
			t.Fatalf("the first session ended before planting: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the first session never planted")
		}
		time.Sleep(20 * time.Millisecond)
	}
	res, err := Run(Options{Command: []string{"true"}, Repo: repo, Dir: repo, Home: agentHome, NoRecord: true, Log: &strings.Builder{}})
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
		t.Errorf("the session with its own HOME found %q, want the nested repository's config the first session planted before it started", res.AuditFindings)
	}
	if _, err := os.Lstat(filepath.Join(agentHome, ".local", "state", "agentbox")); err == nil {
		t.Error("the session kept agentbox's state below the HOME it overlays")
	}
}
