package audit

import (
	"os"
	"testing"
)

// BenchmarkScanRepo measures one scan, with the walk the recorder reuses, of the
// repository $AGENTBOX_BENCH_REPO (for instance the scaling bench's big one).
func BenchmarkScanRepo(b *testing.B) {
	repo := os.Getenv("AGENTBOX_BENCH_REPO")
	if repo == "" {
		b.Skip("AGENTBOX_BENCH_REPO names no repository")
	}
	for b.Loop() {
		if _, err := Scan(repo, ScanOptions{Walk: true}); err != nil {
			b.Fatal(err)
		}
	}
}
