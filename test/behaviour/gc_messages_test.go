package behaviour

import (
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/session/leftovers"
)

// TestGCMessages: gc says "nothing to remove" when there is nothing, counts the
// old sessions it pruned instead of naming the store, and takes log --since's
// durations (3w) (issue 35.11).
func TestGCMessages(t *testing.T) {
	b := newBox(t, "native")
	gc := func(args ...string) result {
		t.Helper()
		r := run(b.fixture().Agentbox(b.repo, append([]string{"gc"}, args...)...))
		if r.code != 0 {
			t.Fatalf("agentbox gc %v:\n%s", args, r)
		}
		// /tmp is the machine's: the checkpoint endpoints and ssh-agent filters of
		// other tests' sessions, killed ones among them, are theirs to collect, not
		// this test's.
		var lines []string
		for _, l := range strings.SplitAfter(r.stdout, "\n") {
			if !strings.Contains(l, "/tmp/"+leftovers.CheckpointPrefix) && !strings.Contains(l, "/tmp/"+leftovers.SSHAgentPrefix) {
				lines = append(lines, l)
			}
		}
		if len(lines) != strings.Count(r.stdout, "\n")+1 && strings.Join(lines, "") == "" {
			lines = []string{"nothing to remove\n"} // only other tests' endpoints were removed
		}
		r.stdout = strings.Join(lines, "")
		return r
	}
	if r := gc(); r.stdout != "nothing to remove\n" {
		t.Errorf("gc with nothing to do:\n%s", r)
	}
	if r := run(b.command(b.repo, []string{"--no-git-save"}, "echo x > f")); r.code != 0 {
		t.Fatalf("session: %s", r)
	}
	if r := gc("--sessions-older-than", "3w"); r.stdout != "nothing to remove\n" {
		t.Errorf("gc --sessions-older-than 3w with a new session:\n%s", r)
	}
	time.Sleep(1100 * time.Millisecond) // the record's time has one-second steps
	if r := gc("--dry-run", "--sessions-older-than", "1s"); r.stdout != "would prune 1 old session of "+b.repo+" (older than 1s)\n" {
		t.Errorf("gc --dry-run:\n%s", r)
	}
	r := gc("--sessions-older-than", "1s")
	if r.stdout != "pruned 1 old session of "+b.repo+" (older than 1s)\n" || strings.Contains(r.stdout, "removed") {
		t.Errorf("gc:\n%s", r)
	}
	if log := run(b.fixture().Agentbox(b.repo, "log")); strings.Count(strings.TrimSpace(log.stdout), "\n") != 0 {
		t.Errorf("the session is still listed:\n%s", log)
	}
}
