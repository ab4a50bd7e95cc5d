package audit

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// TestHostConfigCountsWhatItParses: a host config's bytes are counted against the
// scan's bound (MaxConfigEntries) from the file that is then parsed. hostConfig
// stat'ed the path and opened it again: a path swapped between the two (another
// session's repository, writable there, named by an include) was counted as a
// small file and parsed as a large one, past the bound. The path is swapped by a
// goroutine while the test reads it; every read of the large file must have been
// counted as the large file.
func TestHostConfigCountsWhatItParses(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	large := filepath.Join(dir, "large")
	if err := os.WriteFile(small, []byte("[a]\n\tsmall = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("[b]\n")
	for i := 0; b.Len() < 32<<10; i++ {
		fmt.Fprintf(&b, "\tkey%d = %s\n", i, strings.Repeat("v", 40))
	}
	if err := os.WriteFile(large, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	largeCost := b.Len() / configLineBytes
	path := filepath.Join(dir, "config")
	if err := os.Symlink(small, path); err != nil {
		t.Fatal(err)
	}

	var stop atomic.Bool
	swapped := make(chan error, 1)
	go func() {
		tmp := filepath.Join(dir, "next")
		for i := 0; !stop.Load(); i++ {
			target := small
			if i%2 == 1 {
				target = large
			}
			if err := os.Symlink(target, tmp); err != nil {
				swapped <- err
				return
			}
			if err := os.Rename(tmp, path); err != nil {
				swapped <- err
				return
			}
		}
		swapped <- nil
	}()
	defer func() {
		stop.Store(true)
		if err := <-swapped; err != nil {
			t.Error(err)
		}
	}()

	s := newScanner(dir, dir, ScanOptions{MaxConfigEntries: 1 << 50})
	larges := 0
	for i := 0; i < 3000; i++ {
		before := s.surface.configsHandled
		entries := s.hostConfig(path)
		if len(entries) > 1 {
			larges++
			if spent := s.surface.configsHandled - before; spent < largeCost {
				t.Fatalf("read %d: the large file (%d entries) was parsed and counted as %d, want %d or more", i, len(entries), spent, largeCost)
			}
		}
	}
	if larges == 0 {
		t.Fatal("the large file was never read: the swap did not run")
	}
}
