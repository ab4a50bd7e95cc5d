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

// TestRestoreDefusesPlants: a snapshot holds what another session had planted in
// the Git metadata when it was taken (here the host's core.fsmonitor stands for
// it); the restored copy has it taken out and listed, keeps the user's own pager,
// and the repository itself is left as it is.
func TestRestoreDefusesPlants(t *testing.T) {
	b := newBox(t, "native")
	b.hostSh("git config core.fsmonitor 'touch PWNED; false' && git config core.pager less")
	if r := run(b.command(b.repo, nil, "true")); r.code != 0 {
		t.Fatalf("session: %s", r)
	}
	into := filepath.Join(b.home, "restored")
	r := run(b.fixture().Agentbox(b.repo, "restore", "--into", into))
	if r.code != 0 || !strings.Contains(r.stdout, "taken out, would make Git run a program") || !strings.Contains(r.stdout, "fsmonitor") {
		t.Fatalf("agentbox restore of a snapshot holding core.fsmonitor:\n%s", r)
	}
	restored := readFile(t, filepath.Join(into, ".git/config"))
	if strings.Contains(restored, "fsmonitor") || !strings.Contains(restored, `pager = "less"`) {
		t.Errorf("restored config:\n%s", restored)
	}
	if live := readFile(t, filepath.Join(b.repo, ".git/config")); !strings.Contains(live, "fsmonitor") {
		t.Errorf("the repository's own config was changed:\n%s", live)
	}
}
