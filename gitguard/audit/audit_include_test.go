package audit

import (
	"fmt"
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

// TestSharedIncludeBounded: many nested repositories whose configs each include one
// large file of the tree made the scan handle that file's entries once per
// repository (10^5 repositories and a 16 MiB include: about 10^11 steps). The scan
// handles a bounded number of config entries in all; past the bound the
// repository is reported as not audited, a finding that fails the session.
func TestSharedIncludeBounded(t *testing.T) {
	f := newFixture(t)
	shared := filepath.Join(f.Repo, "shared.inc")
	if err := os.WriteFile(shared, []byte("[alias]\n"+strings.Repeat("a = log\n", 5000)), 0o644); err != nil {
		t.Fatal(err)
	}
	const repos = 40
	for i := range repos {
		git := filepath.Join(f.Repo, "n", fmt.Sprint(i), ".git")
		for _, d := range []string{"objects", "refs"} {
			if err := os.MkdirAll(filepath.Join(git, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		files := map[string]string{
			"HEAD":   "ref: refs/heads/main\n",
			"config": "[core]\n\trepositoryformatversion = 0\n[include]\n\tpath = " + shared + "\n",
		}
		for name, data := range files {
			if err := os.WriteFile(filepath.Join(git, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	scan := func(max int) (*Surface, []Finding) {
		cur, err := Scan(f.Repo, ScanOptions{Home: f.Home, MaxConfigEntries: max})
		if err != nil {
			t.Fatal(err)
		}
		var over []Finding
		for _, fi := range Compare(nil, cur) {
			if strings.Contains(strings.Join(fi.Reasons, " "), "entries in all") {
				over = append(over, fi)
			}
		}
		return cur, over
	}
	if _, over := scan(0); len(over) != 0 {
		t.Errorf("under the default bound, the repository was reported unaudited: %v", over)
	}
	const bound = 50_000 // ten repositories' worth
	cur, over := scan(bound)
	if cur.configsHandled > bound {
		t.Errorf("the scan handled %d config entries against a bound of %d", cur.configsHandled, bound)
	}
	if len(over) != 1 || over[0].Path != f.Repo || !over[0].Unresolved() {
		t.Fatalf("past the bound, want one unresolved finding at the repository; got %v", over)
	}
}

// TestHardLinkedConfigsBounded: one config of few but long entries, hard-linked as
// the config of many nested repositories, is read once per name; its bytes count
// against the scan's bound as its entries do.
func TestHardLinkedConfigsBounded(t *testing.T) {
	f := newFixture(t)
	one := filepath.Join(f.Repo, "one.cfg")
	if err := os.WriteFile(one, []byte("[user]\n\tname = "+strings.Repeat("x", 200<<10)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		git := filepath.Join(f.Repo, "n", fmt.Sprint(i), ".git")
		for _, d := range []string{"objects", "refs"} {
			if err := os.MkdirAll(filepath.Join(git, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(git, "HEAD"), []byte("ref: refs/heads/main\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(one, filepath.Join(git, "config")); err != nil {
			t.Fatal(err)
		}
	}
	cur, err := Scan(f.Repo, ScanOptions{Home: f.Home, MaxConfigEntries: 50_000})
	if err != nil {
		t.Fatal(err)
	}
	if cur.configsHandled > 50_000 {
		t.Errorf("the scan handled %d against a bound of 50,000", cur.configsHandled)
	}
	if fi := findingAt(Compare(nil, cur), f.Repo); fi == nil || !fi.Unresolved() {
		t.Errorf("8 MB of config read through 40 names under a bound of 3 MB: no unresolved finding at the repository (%v)", fi)
	}
}
