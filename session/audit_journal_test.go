package session

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// A journal claimed by a launch that died while auditing goes back to be audited; one
// claimed by a live process stays claimed.
func TestReclaimAbandoned(t *testing.T) {
	dir := t.TempDir()
	repo := "/src/proj"
	dead := filepath.Join(dir, journalPrefix(repo)+"100.json")
	live := filepath.Join(dir, journalPrefix(repo)+"101.json")
	// PID 2^22+1 is above pid_max's ceiling: no such process.
	for _, f := range []string{dead + ".claimed-4194305", live + ".claimed-" + strconv.Itoa(os.Getpid())} {
		if err := os.WriteFile(f, []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	reclaimAbandoned(dir, repo)
	if _, err := os.Stat(dead); err != nil {
		t.Errorf("journal of a dead claimer not put back: %v", err)
	}
	if _, err := os.Stat(live + ".claimed-" + strconv.Itoa(os.Getpid())); err != nil {
		t.Errorf("journal claimed by a live process was touched: %v", err)
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
