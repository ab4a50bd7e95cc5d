package audit

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestIncludedManyTimesExpandedOnce: a session's nested config that includes one
// file of a thousand entries 8,000 times is read as that file once; each include
// line appended its whole expansion again (3.7 GB allocated; the 16 MiB a config
// may be holds 880,000 such lines, far past any machine's memory).
func TestIncludedManyTimesExpandedOnce(t *testing.T) {
	f := newFixture(t)
	sub := filepath.Join(f.Repo, "sub")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	f.Git(sub, "init", "-q")
	if err := os.WriteFile(filepath.Join(sub, ".git", "x"), []byte("[alias]\n"+strings.Repeat("b = !true\n", 1000)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.OpenFile(filepath.Join(sub, ".git", "config"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg.WriteString(strings.Repeat("[include]\npath = x\n", 8000))
	cfg.Close()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cur := f.scan()
	runtime.ReadMemStats(&m1)
	if alloc := m1.TotalAlloc - m0.TotalAlloc; alloc > 256<<20 {
		t.Errorf("the scan allocated %d MiB for a 150 KiB config and a 10 KiB include", alloc>>20)
	}
	if fs := Compare(nil, cur); findingAt(fs, filepath.Join(sub, ".git", "x")) == nil {
		t.Errorf("the included file's dangerous alias is not reported: %v", fs)
	}
}
