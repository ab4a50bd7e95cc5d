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

// BenchmarkScanRepoSince measures the end scan of an unchanged session on
// $AGENTBOX_BENCH_REPO: every listing taken from a launch scan with a watch
// (audit_since_linux.go). BenchmarkScanRepoWatch measures that launch scan.
func BenchmarkScanRepoSince(b *testing.B) {
	repo := os.Getenv("AGENTBOX_BENCH_REPO")
	if repo == "" {
		b.Skip("AGENTBOX_BENCH_REPO names no repository")
	}
	launch, err := Scan(repo, ScanOptions{Walk: true, Watch: true})
	if err != nil || launch.Launch == nil {
		b.Skipf("no watch: %v", err)
	}
	launch.Launch.Stop()
	for b.Loop() {
		if _, err := Scan(repo, ScanOptions{Walk: true, Since: launch.Launch}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkScanRepoWatch(b *testing.B) {
	repo := os.Getenv("AGENTBOX_BENCH_REPO")
	if repo == "" {
		b.Skip("AGENTBOX_BENCH_REPO names no repository")
	}
	for b.Loop() {
		s, err := Scan(repo, ScanOptions{Walk: true, Watch: true})
		if err != nil {
			b.Fatal(err)
		}
		s.Launch.Close()
	}
}
