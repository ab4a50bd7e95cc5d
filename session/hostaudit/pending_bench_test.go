package hostaudit

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/gitguard/audit"
	"github.com/agentbox/agentbox/policy"
)

// BenchmarkStartBesidePendingSessions: a baseline taken while 30 sessions of other
// repositories are pending, each journal read at every reading of the directory
// (pendingReading).
func BenchmarkStartBesidePendingSessions(b *testing.B) {
	state := b.TempDir()
	for range 30 {
		other, err := filepath.EvalSymlinks(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		base, err := audit.Scan(other, audit.ScanOptions{})
		if err != nil {
			b.Fatal(err)
		}
		a := &Auditor{repo: other, id: audit.NewAuditID(), base: base}
		f, _, err := writeJournal(state, a)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { f.Close() })
	}
	repo, err := filepath.EvalSymlinks(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	p := &policy.Policy{Repo: repo, StateDir: state}
	cfg := &Config{Stderr: &bytes.Buffer{}, NoRecord: true}
	for b.Loop() {
		a, err := Start(cfg, p, nil)
		if err != nil {
			b.Fatal(err)
		}
		a.Drop()
	}
}
