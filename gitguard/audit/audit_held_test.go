package audit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestScanHeldDirMoved: the repository, held at its baseline, is renamed away and
// a clean directory put at its path; the end scan reads the held one where it
// lies now, reports the plant there, and the quarantine moves it out of it.
func TestScanHeldDirMoved(t *testing.T) {
	top, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join(top, "repo")
	if err := os.Mkdir(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	held, err := Hold(repo)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	base, err := Scan(repo, ScanOptions{Held: held})
	if err != nil {
		t.Fatal(err)
	}
	gitdir := filepath.Join(repo, "wo/sub/.git")
	for _, d := range []string{"objects", "refs"} {
		if err := os.MkdirAll(filepath.Join(gitdir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(gitdir, "HEAD"), "ref: refs/heads/main\n")
	writeFile(t, filepath.Join(gitdir, "config"), "[core]\n\tfsmonitor = touch /tmp/pwned\n")
	// A pointer to the directory's old path: once it moved, that leads to what
	// took its place, for the user's Git as for the audit.
	if err := os.Mkdir(filepath.Join(repo, "p"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(repo, "p/.git"), "gitdir: "+filepath.Join(repo, "evil")+"\n")
	moved := repo + "-moved"
	if err := os.Rename(repo, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(repo, 0o755); err != nil { // the decoy
		t.Fatal(err)
	}
	cur, err := Scan(repo, ScanOptions{Held: held})
	if err != nil {
		t.Fatal(err)
	}
	if cur.Now != moved {
		t.Errorf("Now %q, want %q", cur.Now, moved)
	}
	findings := Compare(base, cur)
	want := filepath.Join(moved, "wo/sub/.git/config")
	var found *Finding
	for i := range findings {
		if findings[i].Path == want {
			found = &findings[i]
		}
	}
	if found == nil {
		t.Fatalf("no finding at %s: %v", want, findings)
	}
	pointer := false
	for _, f := range findings {
		pointer = pointer || f.Path == filepath.Join(moved, "p/.git")
	}
	if !pointer {
		t.Errorf("the pointer to the old path, which leads out of the moved directory now, was not reported: %v", findings)
	}
	QuarantineTo(findings, "T", filepath.Join(top, "quarantine"))
	if found.Moved == "" || !strings.HasPrefix(found.Moved, filepath.Join(top, "quarantine", "T", moved)) {
		t.Errorf("moved to %q (%v), want below the quarantine at its present path", found.Moved, found.MoveErr)
	}
	if _, err := os.Lstat(want); !os.IsNotExist(err) {
		t.Errorf("the plant is still in the moved directory: %v", err)
	}
}

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestScanHeldGitDirMoved: a writable Git dir outside the repository (a linked
// worktree's common dir), held at the baseline, is renamed away and a clean
// directory put at its path; the end scan reads the held one where it lies now,
// also when the repository itself was removed meanwhile.
func TestScanHeldGitDirMoved(t *testing.T) {
	for _, removed := range []bool{false, true} {
		top, err := filepath.EvalSymlinks(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		repo, common := filepath.Join(top, "repo"), filepath.Join(top, "main/.git")
		for _, d := range []string{repo, common + "/objects", common + "/refs"} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		writeFile(t, filepath.Join(common, "HEAD"), "ref: refs/heads/main\n")
		held, err := Hold(repo)
		if err != nil {
			t.Fatal(err)
		}
		defer held.Close()
		hc, err := Hold(common)
		if err != nil {
			t.Fatal(err)
		}
		defer hc.Close()
		opt := ScanOptions{Held: held, GitDirs: []string{common}, HeldGitDirs: []*Held{hc}}
		base, err := Scan(repo, opt)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(common, "modules/m"), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(common, "modules/m/config"), "[core]\n\tfsmonitor = touch /tmp/pwned\n")
		moved := filepath.Join(top, "main/moved")
		if err := os.Rename(common, moved); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(common, 0o755); err != nil { // the decoy
			t.Fatal(err)
		}
		if removed {
			if err := os.Remove(repo); err != nil {
				t.Fatal(err)
			}
		}
		cur, err := Scan(repo, opt)
		if err != nil {
			t.Fatal(err)
		}
		if cur.Removed != removed || cur.MovedGitDirs[common] != moved {
			t.Errorf("removed %v: Removed %v, MovedGitDirs %v; want %s moved to %s", removed, cur.Removed, cur.MovedGitDirs, common, moved)
		}
		want := filepath.Join(moved, "modules/m/config")
		found := false
		for _, f := range Compare(base, cur) {
			found = found || f.Path == want
		}
		if !found {
			t.Errorf("removed %v: no finding at %s: %v", removed, want, Compare(base, cur))
		}
	}
}
