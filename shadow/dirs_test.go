package shadow

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/treewalk"
)

// dirMode is the permission bits of the directory at path, -1 when there is none.
func dirMode(path string) int {
	fi, err := os.Lstat(path)
	if err != nil || !fi.IsDir() {
		return -1
	}
	return int(fi.Mode().Perm())
}

// TestUndoKeepsDirectoriesItDidNotMake: undo removes the directories the session
// made (an empty one too) and no other — not one that was there, empty, before
// the session — and makes those it removed again with their start bits, whatever
// the umask; the undo, undone, gives the session's tree back.
func TestUndoKeepsDirectoriesItDidNotMake(t *testing.T) {
	for _, mask := range []int{0o077, 0o000} {
		t.Run(fmt.Sprintf("umask %03o", mask), func(t *testing.T) {
			repo := newRepo(t, map[string]string{"a": "a\n", "tree/deep/f": "f\n"})
			for d, mode := range map[string]os.FileMode{"keep": 0o755, "gone": 0o750, "tree": 0o710} {
				os.Mkdir(filepath.Join(repo, d), mode)
				if err := os.Chmod(filepath.Join(repo, d), mode); err != nil {
					t.Fatal(err)
				}
			}
			s, _ := openStore(t, repo)
			record(t, s, Record{Start: time.Now()}, func() {
				write(t, filepath.Join(repo, "keep/new"), "n\n")
				write(t, filepath.Join(repo, "fresh/sub/f"), "n\n")
				os.Mkdir(filepath.Join(repo, "emptymade"), 0o755)
				os.Remove(filepath.Join(repo, "gone"))
				os.RemoveAll(filepath.Join(repo, "tree"))
			})
			old := unix.Umask(mask)
			defer unix.Umask(old)
			plan, err := s.PlanUndo(onlySession(t, s), nil)
			if err != nil {
				t.Fatal(err)
			}
			walk := func() *treewalk.Walk { return walkOf(t, repo) }
			res, err := s.ApplyUndo(plan, Record{Start: time.Now()}, walk)
			if err != nil || len(res.Failed) > 0 {
				t.Fatalf("undo: %v, failed %+v", err, res.Failed)
			}
			want := map[string]int{"keep": 0o755, "gone": 0o750, "tree": 0o710, "fresh": -1, "emptymade": -1, "keep/new": -1}
			for d, mode := range want {
				if got := dirMode(filepath.Join(repo, d)); got != mode {
					t.Errorf("after undo %s: mode %o, want %o (-1: none)", d, got, mode)
				}
			}
			if _, err := os.Lstat(filepath.Join(repo, "keep/new")); !os.IsNotExist(err) {
				t.Errorf("keep/new left: %v", err)
			}
			if got := dirMode(filepath.Join(repo, "tree/deep")); got != 0o755 {
				t.Errorf("tree/deep: mode %o, want its start 0755", got)
			}

			recs, _ := s.Sessions()
			plan, err = s.PlanUndo(recs[0], nil)
			if err != nil {
				t.Fatal(err)
			}
			if res, err := s.ApplyUndo(plan, Record{Start: time.Now()}, walk); err != nil || len(res.Failed) > 0 {
				t.Fatalf("undo of the undo: %v, failed %+v", err, res)
			}
			want = map[string]int{"keep": 0o755, "gone": -1, "tree": -1, "emptymade": 0o755, "fresh/sub": 0o755}
			for d, mode := range want {
				if got := dirMode(filepath.Join(repo, d)); got != mode&^mask && got != mode {
					t.Errorf("after the undo of the undo %s: mode %o, want %o (-1: none)", d, got, mode)
				}
			}
		})
	}
}

// TestUndoPathsDirectories: undo of one path makes its parents with their start
// bits and removes the parents the session made for it that it leaves empty.
func TestUndoPathsDirectories(t *testing.T) {
	repo := newRepo(t, map[string]string{"tree/deep/f": "f\n"})
	if err := os.Chmod(filepath.Join(repo, "tree"), 0o710); err != nil {
		t.Fatal(err)
	}
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, func() {
		write(t, filepath.Join(repo, "fresh/sub/f"), "n\n")
		os.RemoveAll(filepath.Join(repo, "tree"))
	})
	old := unix.Umask(0)
	defer unix.Umask(old)
	session := onlySession(t, s)
	for _, path := range []string{"tree/deep/f", "fresh/sub/f"} {
		plan, err := s.PlanUndo(session, []string{path})
		if err != nil {
			t.Fatal(err)
		}
		if res, err := s.ApplyUndo(plan, Record{Start: time.Now()}, nil); err != nil || len(res.Failed) > 0 {
			t.Fatalf("undo -- %s: %v, %+v", path, err, res)
		}
	}
	for d, mode := range map[string]int{"tree": 0o710, "tree/deep": 0o755, "fresh": -1} {
		if got := dirMode(filepath.Join(repo, d)); got != mode {
			t.Errorf("%s: mode %o, want %o (-1: none)", d, got, mode)
		}
	}
}
