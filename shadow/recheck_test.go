package shadow

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// undoAfter plans the undo of the only session of s, runs between (what another
// process does once the plan is made) and carries the plan out.
func undoAfter(t *testing.T, s *Store, between func()) (*UndoPlan, *UndoResult) {
	t.Helper()
	plan, err := s.PlanUndo(onlySession(t, s), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Changed) > 0 {
		t.Fatalf("changed before the plan: %+v", plan.Changed)
	}
	if between != nil {
		between()
	}
	res, err := s.ApplyUndo(plan, Record{Start: time.Now(), Command: []string{"agentbox", "undo"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return plan, res
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestUndoRechecksEachPathBeforeWriting: what another process writes between the
// undo's plan and its writes is never overwritten or removed — an edit in place, a
// file renamed over one the session added, a file made where the session removed
// one, a rewrite of a file whose bits alone changed — each is named, and the rest
// of the undo goes on.
func TestUndoRechecksEachPathBeforeWriting(t *testing.T) {
	repo := newRepo(t, map[string]string{"edit": "start\n", "other": "o\n", "del": "d\n", "bits": "b\n"})
	if err := os.Chmod(filepath.Join(repo, "bits"), 0o640); err != nil {
		t.Fatal(err)
	}
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, func() {
		write(t, filepath.Join(repo, "edit"), "session\n")
		write(t, filepath.Join(repo, "other"), "session\n")
		write(t, filepath.Join(repo, "new"), "session\n")
		os.Remove(filepath.Join(repo, "del"))
		os.Chmod(filepath.Join(repo, "bits"), 0o600)
	})
	user := map[string]string{"edit": "the user's edit\n", "new": "the user's new\n", "del": "the user's del\n", "bits": "the user's bits\n"}
	_, res := undoAfter(t, s, func() {
		f, err := os.OpenFile(filepath.Join(repo, "edit"), os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(user["edit"]) // in place: the same inode
		f.Close()
		write(t, filepath.Join(repo, ".new.tmp"), user["new"])
		if err := os.Rename(filepath.Join(repo, ".new.tmp"), filepath.Join(repo, "new")); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(repo, "del"), user["del"])
		f, err = os.OpenFile(filepath.Join(repo, "bits"), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString("the user's bits\n"[len("b\n"):])
		f.Close()
	})
	user["bits"] = "b\n" + user["bits"][len("b\n"):]
	for name, want := range user {
		if got := readFile(t, filepath.Join(repo, name)); got != want {
			t.Errorf("%s: %q after undo, want the user's %q", name, got, want)
		}
	}
	if got := readFile(t, filepath.Join(repo, "other")); got != "o\n" {
		t.Errorf("other: %q after undo, want it put back", got)
	}
	failed := map[string]string{}
	for _, f := range res.Failed {
		failed[f.Path] = f.Reason
	}
	for name := range user {
		if !strings.Contains(failed[name], "changed while undo ran") {
			t.Errorf("%s: not named as changed since the plan (failed: %+v)", name, res.Failed)
		}
	}
	if len(res.Failed) != len(user) || res.Done != 1 {
		t.Errorf("done %d, failed %+v; want 1 done and the user's %d", res.Done, res.Failed, len(user))
	}
	ents, _ := os.ReadDir(repo)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".agentbox-undo-") {
			t.Errorf("undo left %s behind", e.Name())
		}
	}
}

// TestUndoRecheckNeverWritesThroughASwappedParent: a parent directory swapped for
// a symlink after the plan makes that path fail; nothing is written where the link
// points.
func TestUndoRecheckNeverWritesThroughASwappedParent(t *testing.T) {
	repo := newRepo(t, map[string]string{"sub/f": "start\n"})
	outside := t.TempDir()
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, func() {
		os.Remove(filepath.Join(repo, "sub/f"))
	})
	_, res := undoAfter(t, s, func() {
		if err := os.Rename(filepath.Join(repo, "sub"), filepath.Join(repo, "sub.old")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, filepath.Join(repo, "sub")); err != nil {
			t.Fatal(err)
		}
	})
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("undo wrote through the swapped parent: %v", ents)
	}
	if len(res.Failed) != 1 || res.Failed[0].Path != "sub/f" {
		t.Errorf("failed %+v, want sub/f", res.Failed)
	}
}

// TestSeenComparesContent: a write of the same size that leaves the stat as the
// plan saw it (a write within the timestamps' tick) is still told apart by the
// content the plan read.
func TestSeenComparesContent(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	write(t, path, "session\n")
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	was := seenAt(dfd, "f")
	was.oid = linkBlobID([]byte("session\n"))
	if !was.sameContent(dfd, "f", &was.st) {
		t.Fatal("the same content taken for another")
	}
	if err := os.WriteFile(path, []byte("someone\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if was.sameContent(dfd, "f", &was.st) {
		t.Error("a same-size rewrite taken for the content the plan read")
	}
}

// TestUndoHardLinkedFiles: a file the session edited and hard-linked elsewhere is
// put back, though removing the link changes its ctime and link count: undo's own
// writes are not taken for another process's.
func TestUndoHardLinkedFiles(t *testing.T) {
	repo := newRepo(t, map[string]string{"a": "start\n"})
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, func() {
		// A new file (as an editor saves) in a's place, linked as b.
		write(t, filepath.Join(repo, ".a.new"), "session\n")
		if err := os.Rename(filepath.Join(repo, ".a.new"), filepath.Join(repo, "a")); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(filepath.Join(repo, "a"), filepath.Join(repo, "b")); err != nil {
			t.Fatal(err)
		}
	})
	_, res := undoAfter(t, s, nil)
	if len(res.Failed) > 0 {
		t.Fatalf("failed: %+v", res.Failed)
	}
	if got := readFile(t, filepath.Join(repo, "a")); got != "start\n" {
		t.Errorf("a: %q", got)
	}
	if _, err := os.Lstat(filepath.Join(repo, "b")); !os.IsNotExist(err) {
		t.Errorf("b left: %v", err)
	}
}
