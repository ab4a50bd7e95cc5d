package sandbox

import (
	"runtime"
	"sort"
	"testing"
	"time"
)

// BenchmarkRun is one launch of `true` through the Go API from this (small) test
// process — plan building, the init's clone and re-exec, every mount, the command —
// directly and through a Launcher (one more hop), interleaved launch by launch.
// ns/op is one pair; direct-ms and launcher-ms are the medians of each.
func BenchmarkRun(b *testing.B) {
	benchLaunchers(b)
}

// BenchmarkRunLargeHeap is BenchmarkRun from a process holding a 1 GiB heap: where
// the init is not vforked, a direct launch forks with the page tables of the whole
// heap; the Launcher's helper was started before the heap grew. Filling the heap
// takes seconds:
//
//	go test ./sandbox/ -run '^$' -bench RunLargeHeap -benchtime 40x
func BenchmarkRunLargeHeap(b *testing.B) {
	l := newBenchLauncher(b)
	heap := make([]byte, 1<<30)
	for i := 0; i < len(heap); i += 4096 {
		heap[i] = 1 // touch every page, so that it is mapped
	}
	interleave(b, l)
	runtime.KeepAlive(heap)
}

func benchLaunchers(b *testing.B) {
	interleave(b, newBenchLauncher(b))
}

func newBenchLauncher(b *testing.B) *Launcher {
	l, err := NewLauncher("")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

func interleave(b *testing.B, l *Launcher) {
	repo := b.TempDir()
	opts := Options{Command: []string{"true"}, Repo: repo, Dir: repo}
	var direct, viaLauncher []float64
	once := func(run func(Options) (Result, error), into *[]float64) {
		t0 := time.Now()
		res, err := run(opts)
		if err != nil || res.Status != 0 {
			b.Fatalf("status %d, %v", res.Status, err)
		}
		*into = append(*into, float64(time.Since(t0))/1e6)
	}
	for b.Loop() {
		once(Run, &direct)
		once(l.Run, &viaLauncher)
	}
	b.ReportMetric(median(direct), "direct-ms")
	b.ReportMetric(median(viaLauncher), "launcher-ms")
}

func median(s []float64) float64 {
	if len(s) == 0 {
		return 0
	}
	sort.Float64s(s)
	return s[len(s)/2]
}
