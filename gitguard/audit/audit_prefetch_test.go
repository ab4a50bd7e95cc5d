package audit

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"syscall"
	"testing"
	"unsafe"
)

// TestPrefetchSameScan checks that listing directories ahead (audit_prefetch_linux.go)
// changes nothing a scan returns: the same items, the same skipped places in the same
// order, the same walk — on a tree with a nested repository (with subdirectories
// of its own), a FIFO where Git opens a file, a symlinked directory and a planted
// hook, with and without the entry bound hit in the middle of a directory, and with
// the depth bound hit; with the workers scheduling what they find below what they
// list (they did, on the whole tree) and without.
func TestPrefetchSameScan(t *testing.T) {
	f := newFixture(t)
	for d := range 60 {
		for i := range 30 {
			f.Write(fmt.Sprintf("src/d%02d/sub/f%02d", d, i), "x\n", 0o644)
		}
		f.Write(fmt.Sprintf("src/d%02d/g", d), "y\n", 0o644)
	}
	f.GitdirAt("src/d07/.git")
	f.Write("src/d07/.git/hooks/pre-commit", "#!/bin/sh\n", 0o755)
	f.Write("src/d08/.gitmodules", "[submodule \"m\"]\n\tpath = m\n\turl = ./m\n", 0o644)
	if err := syscall.Mkfifo(filepath.Join(f.Repo, "src/d09/.gitattributes"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../d01", filepath.Join(f.Repo, "src/d10/link")); err != nil {
		t.Fatal(err)
	}
	deep := "deep"
	for range 6 {
		deep += "/d"
	}
	f.Write(deep+"/f", "z\n", 0o644)

	f.Write("src/d07/nsub/x/f", "n\n", 0o644)
	scan := func(opt ScanOptions, prefetch bool) *Surface {
		t.Helper()
		noPrefetch = !prefetch
		defer func() { noPrefetch = false }()
		s, err := Scan(f.Repo, opt)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, opt := range []ScanOptions{
		{Walk: true},
		{},
		{Walk: true, MaxEntries: 1000}, // stops inside src/dNN/sub
		{Walk: true, MaxEntries: 75},   // stops while listing src itself
		{Walk: true, MaxDepth: 4},
	} {
		ahead := scheduledAhead.Load()
		seq, pre := scan(opt, false), scan(opt, true)
		if ahead = scheduledAhead.Load() - ahead; opt.MaxEntries == 0 && opt.MaxDepth == 0 && ahead < 60 {
			t.Errorf("Walk %v: the workers scheduled %d directories below what they listed, want the 60 src/dNN/sub at least", opt.Walk, ahead)
		}
		noAhead = true
		scanOnly := scan(opt, true)
		noAhead = false
		if scanOnly.Walk != nil {
			scanOnly.Walk.Clock = pre.Walk.Clock
		}
		if seq.Walk != nil {
			if seq.Walk.Clock == pre.Walk.Clock {
				t.Fatal("two scans read the same clock")
			}
			seq.Walk.Clock = pre.Walk.Clock
		}
		if !reflect.DeepEqual(scanOnly, pre) {
			t.Errorf("MaxEntries %d, MaxDepth %d, Walk %v: the scans with and without the workers' scheduling differ:\nscan's: %+v %v\nworkers': %+v %v",
				opt.MaxEntries, opt.MaxDepth, opt.Walk, scanOnly.Skipped, walkLen(scanOnly), pre.Skipped, walkLen(pre))
		}
		if !reflect.DeepEqual(seq, pre) {
			t.Errorf("MaxEntries %d, MaxDepth %d, Walk %v: the scans differ:\nsequential: %+v %v\nprefetched: %+v %v",
				opt.MaxEntries, opt.MaxDepth, opt.Walk, seq.Skipped, walkLen(seq), pre.Skipped, walkLen(pre))
		}
		if opt.MaxEntries != 0 && (pre.Walk.Complete || len(pre.Skipped) == 0) {
			t.Errorf("MaxEntries %d: bound not reported: %+v", opt.MaxEntries, pre.Skipped)
		}
		if opt.Walk && opt.MaxEntries == 0 && opt.MaxDepth == 0 && (!pre.Walk.Complete || len(pre.Walk.Entries) < 60*32) {
			t.Errorf("whole tree: walk complete %v with %d entries", pre.Walk.Complete, len(pre.Walk.Entries))
		}
		if pre.Walk != nil {
			// Grown by blocks of 3 entries (a nested repository's mark lands on
			// every position of a block), the walk is the same.
			walkChunk = 3
			small := scan(opt, true)
			walkChunk = 8192
			small.Walk.Clock = pre.Walk.Clock
			if !reflect.DeepEqual(small, pre) {
				t.Errorf("MaxEntries %d, MaxDepth %d: the walk grown by small blocks differs", opt.MaxEntries, opt.MaxDepth)
			}
			nested := 0
			for _, e := range pre.Walk.Entries {
				if e.Nested {
					nested++
				}
			}
			if opt.MaxEntries == 0 && opt.MaxDepth == 0 && nested != 1 {
				t.Errorf("%d entries marked as nested repositories, want 1 (src/d07)", nested)
			}
			// Each entry names its path relative to the top, and is what is there.
			for _, e := range pre.Walk.Entries {
				var st syscall.Stat_t
				if err := syscall.Lstat(filepath.Join(f.Repo, e.Rel), &st); err != nil || st.Ino&0xffffffff != uint64(e.Ino) || st.Mode&syscall.S_IFMT != e.Mode {
					t.Errorf("walk entry %+v: lstat %v, %+v", e, err, st)
					break
				}
			}
		}
	}
}

func walkLen(s *Surface) int {
	if s.Walk == nil {
		return -1
	}
	return len(s.Walk.Entries)
}

// TestListingHoldsNoCopy: a directory's listing is the entries its reader cut,
// not a copy of them (appendBatch). A launch walk's listings live to the session's
// end in fresh heap, so a copy of each would be pages faulted in for nothing.
func TestListingHoldsNoCopy(t *testing.T) {
	dir := t.TempDir()
	const n = 200
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// What the reader itself allocates for n entries of four-character names:
	// the names with their heads and NULs, and the slice of entries it returns,
	// each a pointer to its name held in the interface (no object per entry,
	// nor an array of them: 24 bytes an entry that the slack below does not
	// cover).
	reader := n*(direntHead+5) + n*int(unsafe.Sizeof(os.DirEntry(nil)))
	least := uint64(1 << 62)
	for range 5 {
		p := &prefetcher{max: 1 << 20}
		l := &listing{done: make(chan struct{})}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		p.list(prefetchJob{dir: dir, l: l})
		runtime.ReadMemStats(&after)
		if len(l.ents) != n || !l.sorted {
			t.Fatalf("listed %d entries (sorted %v), want %d", len(l.ents), l.sorted, n)
		}
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	// A copy of the entries' slice would add n*16 bytes; size classes and the
	// sort's few small objects stay well under that.
	if slack := uint64(n * int(unsafe.Sizeof(os.DirEntry(nil))) / 2); least > uint64(reader)+slack {
		t.Errorf("listing %d entries allocated %d bytes, want at most %d (the reader's %d and %d of slack)", n, least, uint64(reader)+slack, reader, slack)
	}
}
