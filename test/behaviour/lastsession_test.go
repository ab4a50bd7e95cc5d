package behaviour

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestLastSession: show, diff and restore take the repository's last session when
// given none, restore takes a session id, show keeps the launch's phases for
// --timings, and a restore says how to take a lost branch back (issue 35.8).
func TestLastSession(t *testing.T) {
	b := newBox(t, "native")
	if r := run(b.command(b.repo, nil, "echo changed > README")); r.code != 0 {
		t.Fatalf("session: %s", r)
	}
	log := run(b.fixture().Agentbox(b.repo, "log"))
	lines := strings.Split(strings.TrimSpace(log.stdout), "\n")
	if log.code != 0 || len(lines) != 2 {
		t.Fatalf("agentbox log:\n%s", log)
	}
	id := strings.Fields(lines[1])[0]
	show := run(b.fixture().Agentbox(b.repo, "show"))
	if show.code != 0 || !strings.Contains(show.stdout, "session      "+id) || strings.Contains(show.stdout, "phases") {
		t.Errorf("agentbox show (no id): want session %s without phases:\n%s", id, show)
	}
	if r := run(b.fixture().Agentbox(b.repo, "show", "--timings")); r.code != 0 || !strings.Contains(r.stdout, "phases") {
		t.Errorf("agentbox show --timings: no phases:\n%s", r)
	}
	if r := run(b.fixture().Agentbox(b.repo, "diff")); r.code != 0 || !strings.Contains(r.stdout, "+changed") {
		t.Errorf("agentbox diff (no id):\n%s", r)
	}
	into := filepath.Join(b.home, "restored")
	r := run(b.fixture().Agentbox(b.repo, "restore", id[:8], "--into", into))
	if r.code != 0 || !strings.Contains(r.stdout, "restored the Git metadata of "+b.repo) ||
		!strings.Contains(r.stdout, "a lost branch: git --git-dir "+into+"/.git for-each-ref") || !exists(into+"/.git/HEAD") {
		t.Errorf("agentbox restore ID:\n%s", r)
	}
	r = run(b.fixture().Agentbox(b.repo, "restore", "--into", into+"2"))
	if r.code != 0 || !exists(into+"2/.git/HEAD") {
		t.Errorf("agentbox restore (no argument):\n%s", r)
	}
	if r := run(b.fixture().Agentbox(b.repo, "restore", "nosuchid")); r.code != 125 || !strings.Contains(r.stderr, "is not a session id") {
		t.Errorf("agentbox restore nosuchid:\n%s", r)
	}
	if r := run(b.fixture().Agentbox(b.home, "show", "--json")); r.code != 125 || !strings.Contains(r.stderr, "no sessions recorded") {
		t.Errorf("agentbox show where nothing was recorded:\n%s", r)
	}
}
