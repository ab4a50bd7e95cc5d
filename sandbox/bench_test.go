package sandbox

import (
	"runtime"
	"testing"
)

// BenchmarkRun is one launch of `true` through the Go API from this (small) test
// process — plan building, the init's clone and re-exec, every mount, the command —
// directly and through a Launcher (one more hop).
func BenchmarkRun(b *testing.B) {
	benchLaunchers(b)
}

// BenchmarkRunLargeHeap is BenchmarkRun from a process holding a 1 GiB heap: a
// direct launch forks with the page tables of the whole heap; the Launcher's helper
// was started before the heap grew. Filling the heap takes seconds:
//
//	go test ./sandbox/ -run '^$' -bench RunLargeHeap -benchtime 20x
func BenchmarkRunLargeHeap(b *testing.B) {
	heap := make([]byte, 1<<30)
	for i := 0; i < len(heap); i += 4096 {
		heap[i] = 1 // touch every page, so that it is mapped
	}
	benchLaunchers(b)
	runtime.KeepAlive(heap)
}

func benchLaunchers(b *testing.B) {
	repo := b.TempDir()
	opts := Options{Command: []string{"true"}, Repo: repo, Dir: repo}
	l, err := NewLauncher("")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	for _, c := range []struct {
		name string
		run  func(Options) (Result, error)
	}{{"direct", Run}, {"launcher", l.Run}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if res, err := c.run(opts); err != nil || res.Status != 0 {
					b.Fatalf("status %d, %v", res.Status, err)
				}
			}
		})
	}
}
