package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// plantingSession starts a session of first's options (its Command is set here)
// that plants a nested repository's config with an fsmonitor in repo and then
// waits, at most a minute, until it is let go; it returns once the plant is in
// place. end lets it go and returns how it ended. name says which session it is
// in failures.
func plantingSession(t *testing.T, repo, name string, first Options) (end func() error) {
	t.Helper()
	plant, release := filepath.Join(repo, "sub", ".git", "config"), filepath.Join(repo, "release")
	t.Cleanup(func() { os.WriteFile(release, nil, 0o644) })
	done := make(chan error, 1)
	first.Command = []string{"/bin/sh", "-c", `git init -q "$1/sub" && printf '[core]\n\tfsmonitor = touch /tmp/pwned\n' > "$1/sub/.git/config"; i=0; while [ ! -e "$1/release" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done`, "sh", repo}
	go func() {
		_, err := Run(first)
		done <- err
	}()
	deadline := time.Now().Add(time.Minute)
	// Its content, not the file: git init writes a plain config first.
	for b, err := os.ReadFile(plant); err != nil || !strings.Contains(string(b), "fsmonitor"); b, err = os.ReadFile(plant) {
		select {
		case err := <-done:
			t.Fatalf("%s ended before planting: %v", name, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never planted", name)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return func() error {
		os.WriteFile(release, nil, 0o644)
		return <-done
	}
}

// foundPlant says whether findings name the config plantingSession plants.
func foundPlant(findings []string) bool {
	for _, f := range findings {
		if strings.Contains(f, "sub/.git/config") {
			return true
		}
	}
	return false
}
