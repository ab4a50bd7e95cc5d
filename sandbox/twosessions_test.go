package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTwoRunsInOneProcessKeepTwoJournals: a program that runs two sessions of one
// repository at once (two goroutines calling Run) keeps a pending-audit journal for
// each. On main both had the name HASH-PID.journal: the second's replaced the
// first's, and when the second ended it removed the only one, so the first ran on
// with none. A session started then took the first's plant for the user's own in
// its baseline (and `agentbox undo` would not see the first running, nor the next
// launch audit it if the program were killed).
func TestTwoRunsInOneProcessKeepTwoJournals(t *testing.T) {
	if !asTestUser(t) {
		return
	}
	repo := newRepo(t)
	plant := filepath.Join(repo, "sub", ".git", "config")
	running, goPlant, release := filepath.Join(repo, "running"), filepath.Join(repo, "go-plant"), filepath.Join(repo, "release")
	t.Cleanup(func() { os.WriteFile(release, nil, 0o644) })
	first := make(chan error, 1)
	go func() {
		// Says it runs, plants when told, then waits (each at most a minute) until
		// the test lets it end.
		script := `wait_for() { i=0; while [ ! -e "$1" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; }
: > "$1/running"
wait_for "$1/go-plant"
git init -q "$1/sub" && printf '[core]\n\tfsmonitor = touch /tmp/pwned\n' > "$1/sub/.git/config"
wait_for "$1/release"`
		_, err := Run(Options{Command: []string{"/bin/sh", "-c", script, "sh", repo}, Repo: repo, Dir: repo, NoRecord: true, Log: &strings.Builder{}})
		first <- err
	}()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for !ok() {
			select {
			case err := <-first:
				t.Fatalf("the first session ended before %s: %v", what, err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("the first session never %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("ran", func() bool { _, err := os.Lstat(running); return err == nil })
	// A second session of the repository, in the same process, starts and ends
	// while the first runs.
	if _, err := Run(Options{Command: []string{"true"}, Repo: repo, Dir: repo, NoRecord: true, Log: &strings.Builder{}}); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(goPlant, nil, 0o644)
	waitFor("planted", func() bool {
		b, err := os.ReadFile(plant)
		return err == nil && strings.Contains(string(b), "fsmonitor")
	})
	// A third starts after the plant: its baseline is the first's.
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
		t.Errorf("the third session found %q, want the nested repository's config the first session planted before it started", res.AuditFindings)
	}
}
