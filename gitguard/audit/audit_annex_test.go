package audit

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAnnexPastTheEntryBound: a git-annex store of many small directories (as
// objects/XXX/YYY/KEY/ makes it) larger than the scan's entry bound is reported
// as not searched, with the place it stopped, rather than passed over; below the
// bound the same store is searched whole.
func TestAnnexPastTheEntryBound(t *testing.T) {
	f := newFixture(t)
	objects := filepath.Join(f.Repo, ".git/annex/objects")
	for i := range 60 {
		key := filepath.Join(objects, fmt.Sprintf("%03x/%03x/KEY%d", i, i, i))
		if err := os.MkdirAll(key, 0o755); err != nil {
			t.Fatal(err)
		}
		f.Write(filepath.Join(".git/annex/objects", fmt.Sprintf("%03x/%03x/KEY%d/KEY%d", i, i, i, i)), "x", 0o444)
	}
	bounded := func(max int) *Surface {
		s, err := Scan(f.Repo, ScanOptions{Home: f.Home, MaxEntries: max})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	full := bounded(0)
	for _, sk := range full.Skipped {
		if strings.Contains(sk.Path, "/annex") {
			t.Fatalf("unbounded scan skipped %s: %s", sk.Path, sk.Reason)
		}
	}
	// Past the repository's own entries, inside the store.
	s := bounded(countEntries(t, f.Repo) - 100)
	var said bool
	for _, sk := range s.Skipped {
		said = said || strings.Contains(sk.Path, "/.git/annex") && strings.Contains(sk.Reason, "not searched")
	}
	if !said {
		t.Errorf("an annex past the entry bound was not reported as not searched: %+v", s.Skipped)
	}
}

// countEntries counts every entry below dir.
func countEntries(t *testing.T, dir string) int {
	n := 0
	if err := filepath.WalkDir(dir, func(string, fs.DirEntry, error) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}
