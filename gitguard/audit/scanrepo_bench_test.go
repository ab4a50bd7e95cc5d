package audit

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
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

// BenchmarkScanRepoSinceChanged is BenchmarkScanRepoSince after a session that
// wrote a file in each of ten directories: those are read again, and the walk is
// made of the kept listings and the new ones. Only the end scan is timed.
func BenchmarkScanRepoSinceChanged(b *testing.B) {
	repo := os.Getenv("AGENTBOX_BENCH_REPO")
	if repo == "" {
		b.Skip("AGENTBOX_BENCH_REPO names no repository")
	}
	var dirs []string
	_ = filepath.WalkDir(repo, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil || !d.IsDir():
		case d.Name() == ".git":
			return filepath.SkipDir
		case len(dirs) < 1000:
			dirs = append(dirs, p)
		}
		return nil
	})
	for b.Loop() {
		b.StopTimer()
		launch, err := Scan(repo, ScanOptions{Walk: true, Watch: true})
		if err != nil || launch.Launch == nil {
			b.Skipf("no watch: %v", err)
		}
		for k := range 10 {
			f := filepath.Join(dirs[(k*len(dirs)/10+1)%len(dirs)], "agentbox-bench-changed")
			if err := os.WriteFile(f, []byte(time.Now().String()), 0o644); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { os.Remove(f) })
		}
		launch.Launch.Stop()
		b.StartTimer()
		if _, err := Scan(repo, ScanOptions{Walk: true, Since: launch.Launch}); err != nil {
			b.Fatal(err)
		}
	}
}
