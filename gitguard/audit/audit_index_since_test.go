package audit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEndScanTakesSettledIndex: a session's end scan takes its launch scan's
// reading of an index whose lstat is unchanged and was settled at the launch, and
// reads again one written since (same size, mtime put back) or one too young to
// vouch for.
func TestEndScanTakesSettledIndex(t *testing.T) {
	requireWatch(t)
	clean := indexOf(2, 20, false, []string{"README", "abcd/efghi/jklmnopqrstu"})
	planted := indexOf(2, 20, false, []string{"README", ".git/hooks/post-checkout"})
	if len(clean) != len(planted) {
		t.Fatalf("the two indexes differ in size: %d, %d", len(clean), len(planted))
	}
	for _, c := range []struct {
		name    string
		settle  bool
		plant   bool
		reads   int64  // by the end scan
		dangers string // the end scan's, joined
	}{
		{"settled, unchanged", true, false, 0, ""},
		{"settled, rewritten with its size and mtime", true, true, 1, ".git/hooks/post-checkout"},
		{"young, unchanged", false, false, 1, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			index := filepath.Join(f.Repo, ".git", "index")
			if err := os.WriteFile(index, clean, 0o644); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(index)
			if err != nil {
				t.Fatal(err)
			}
			if c.settle {
				time.Sleep(indexSettled + 200*time.Millisecond)
			}
			opt := ScanOptions{Home: f.Home}
			launch := watchedScan(t, f.Repo, opt)
			defer launch.Launch.Close()
			if it := launch.Items[index]; it == nil || len(it.Dangers) != 0 {
				t.Fatalf("launch: the clean index reads as %+v", it)
			}
			if c.plant {
				if err := os.WriteFile(index, planted, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Chtimes(index, fi.ModTime(), fi.ModTime()); err != nil {
					t.Fatal(err)
				}
			}
			launch.Launch.Stop()
			opt.Since = launch.Launch
			before := indexReads.Load()
			end, err := Scan(f.Repo, opt)
			if err != nil {
				t.Fatal(err)
			}
			if got := indexReads.Load() - before; got != c.reads {
				t.Errorf("the end scan read %d indexes, want %d", got, c.reads)
			}
			it := end.Items[index]
			if it == nil {
				t.Fatal("end: the index is not in the exec surface")
			}
			if got := strings.Join(it.Dangers, "; "); c.dangers == "" && got != "" || !strings.Contains(got, c.dangers) {
				t.Errorf("end: dangers %q, want %q", got, c.dangers)
			}
		})
	}
}
