package audit

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// Like the launcher's, it is told how many entries to expect (WalkHint).
func BenchmarkScanRepoWatch(b *testing.B) {
	repo := os.Getenv("AGENTBOX_BENCH_REPO")
	if repo == "" {
		b.Skip("AGENTBOX_BENCH_REPO names no repository")
	}
	hint := launchHint(b, repo)
	for b.Loop() {
		s, err := Scan(repo, ScanOptions{Walk: true, Watch: true, WalkHint: hint})
		if err != nil {
			b.Fatal(err)
		}
		s.Launch.Close()
	}
}

// launchHint is the WalkHint the launcher would pass for repo: the entries of a
// walk of it, and a directory per 64 (hostaudit.Start's, from the shadow index).
func launchHint(b *testing.B, repo string) int {
	s, err := Scan(repo, ScanOptions{Walk: true})
	if err != nil {
		b.Fatal(err)
	}
	n := len(s.Walk.Entries)
	return n + n/64
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

// BenchmarkScanRepoSinceEdited is BenchmarkScanRepoSinceChanged for a session that
// edited a file in place in each of ten directories (what an agent does most):
// those directories kept their names, so their listings are taken with the one
// file lstat'ed again. Each file gets its size back after the run.
func BenchmarkScanRepoSinceEdited(b *testing.B) {
	repo := os.Getenv("AGENTBOX_BENCH_REPO")
	if repo == "" {
		b.Skip("AGENTBOX_BENCH_REPO names no repository")
	}
	var files []string
	_ = filepath.WalkDir(repo, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
		case d.Name() == ".git":
			return filepath.SkipDir
		case d.Type().IsRegular() && (len(files) == 0 || filepath.Dir(files[len(files)-1]) != filepath.Dir(p)) && len(files) < 1000:
			files = append(files, p)
		}
		return nil
	})
	if len(files) < 10 {
		b.Skip("fewer than ten directories with files")
	}
	var edited []string
	for k := range 10 {
		f := files[(k*len(files)/10+1)%len(files)]
		fi, err := os.Stat(f)
		if err != nil {
			b.Fatal(err)
		}
		edited = append(edited, f)
		b.Cleanup(func() { os.Truncate(f, fi.Size()) })
	}
	for b.Loop() {
		b.StopTimer()
		launch, err := Scan(repo, ScanOptions{Walk: true, Watch: true})
		if err != nil || launch.Launch == nil {
			b.Skipf("no watch: %v", err)
		}
		for _, f := range edited {
			w, err := os.OpenFile(f, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				b.Fatal(err)
			}
			w.WriteString("x")
			w.Close()
		}
		launch.Launch.Stop()
		b.StartTimer()
		if _, err := Scan(repo, ScanOptions{Walk: true, Since: launch.Launch}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScanRepoWatchRing is BenchmarkScanRepoWatch with the walk's lstats
// by fstatat and through io_uring, interleaved: wall and CPU (of the whole
// process, the ring's kernel workers included) per entry of each.
func BenchmarkScanRepoWatchRing(b *testing.B) {
	repo := os.Getenv("AGENTBOX_BENCH_REPO")
	if repo == "" {
		b.Skip("AGENTBOX_BENCH_REPO names no repository")
	}
	var wall, cpu [2]time.Duration
	entries := 0
	hint := launchHint(b, repo)
	for b.Loop() {
		for k, ring := range []bool{false, true} {
			noRing = !ring
			c0, t0 := processCPU(), time.Now()
			s, err := Scan(repo, ScanOptions{Walk: true, Watch: true, WalkHint: hint})
			wall[k] += time.Since(t0)
			cpu[k] += processCPU() - c0
			if err != nil {
				b.Fatal(err)
			}
			entries = len(s.Walk.Entries)
			s.Launch.Close()
		}
	}
	noRing = false
	n := float64(b.N)
	b.ReportMetric(float64(wall[0].Microseconds())/n, "fstatat-µs")
	b.ReportMetric(float64(cpu[0].Microseconds())/n, "fstatat-cpu-µs")
	b.ReportMetric(float64(wall[1].Microseconds())/n, "uring-µs")
	b.ReportMetric(float64(cpu[1].Microseconds())/n, "uring-cpu-µs")
	b.ReportMetric(float64(entries), "entries")
}

// processCPU is the process's user and system time, every thread's.
func processCPU() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
