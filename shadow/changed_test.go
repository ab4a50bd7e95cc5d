package shadow

import (
	"crypto/sha1"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/treewalk"
)

// TestWalkStagingMatchesSweep: after each of a run of sessions that change the tree
// in every way the walk must notice, the record taken from the audit's walk
// (changed.go) holds the same tree as a full sweep of the same working tree, and
// only the first record swept.
func TestWalkStagingMatchesSweep(t *testing.T) {
	repo := newRepo(t, map[string]string{
		"a.txt": "a\n", "dir/b.txt": "b\n", "dir/sub/c.txt": "c\n", "gone/d.txt": "d\n",
		"x/.gitignore": "*.tmp\n", "x/keep.txt": "k\n", "link": "l\n", "todir": "f\n",
		"fromdir/e.txt": "e\n",
		"swap/in/f.txt": "swap's own\n", "swap/in/deep/g.txt": "g\n", "swap/keep.txt": "k\n",
		"donor/in/f.txt": "the donor's\n", "donor/in/deep/g.txt": "donor g\n", "donor/in/h.txt": "h\n",
		"donor2/in/f.txt": "the other donor's\n", "donor2/in/deep/g.txt": "donor2 g\n",
		"self/.gitignore": ".gitignore\nhidden.txt\n", "self/keep.txt": "k\n",
	})
	write(t, filepath.Join(repo, "self", "hidden.txt"), "ignored until self/.gitignore goes\n")
	// Made before the first record, so their ctimes are old by the time they turn up.
	write(t, filepath.Join(repo, "x", "old.tmp"), "ignored until x/.gitignore changes\n")
	outside := t.TempDir()
	write(t, filepath.Join(outside, "moved", "m.txt"), "moved in whole\n")
	write(t, filepath.Join(outside, "hard.txt"), "linked in\n")

	s, _ := openStore(t, repo)
	steps := []struct {
		name   string
		change func()
	}{
		{"nothing", nil},
		{"add, modify, remove", func() {
			write(t, filepath.Join(repo, "new.txt"), "n\n")
			write(t, filepath.Join(repo, "dir", "b.txt"), "b2\n")
			must(t, os.Remove(filepath.Join(repo, "dir", "sub", "c.txt")))
		}},
		{"nothing again", nil},
		{"remove at the top", func() { must(t, os.Remove(filepath.Join(repo, "new.txt"))) }},
		{"mode, type changes", func() {
			must(t, os.Chmod(filepath.Join(repo, "a.txt"), 0o755))
			must(t, os.Remove(filepath.Join(repo, "link")))
			must(t, os.Symlink("a.txt", filepath.Join(repo, "link")))
			must(t, os.Remove(filepath.Join(repo, "todir")))
			write(t, filepath.Join(repo, "todir", "inner.txt"), "i\n")
			must(t, os.RemoveAll(filepath.Join(repo, "fromdir")))
			write(t, filepath.Join(repo, "fromdir"), "now a file\n")
		}},
		{"directories", func() {
			must(t, os.RemoveAll(filepath.Join(repo, "gone")))
			must(t, os.Rename(filepath.Join(repo, "dir"), filepath.Join(repo, "renamed")))
			must(t, os.Rename(filepath.Join(outside, "moved"), filepath.Join(repo, "moved")))
			must(t, os.Link(filepath.Join(outside, "hard.txt"), filepath.Join(repo, "hard.txt")))
		}},
		{"a directory replaced by another (its content old, its names tracked)", func() {
			must(t, os.RemoveAll(filepath.Join(repo, "swap", "in")))
			must(t, os.Rename(filepath.Join(repo, "donor", "in"), filepath.Join(repo, "swap", "in")))
		}},
		{"two tracked directories exchanged (renameat2 RENAME_EXCHANGE: the names stay)", func() {
			must(t, unix.Renameat2(unix.AT_FDCWD, filepath.Join(repo, "swap", "in"), unix.AT_FDCWD, filepath.Join(repo, "donor2", "in"), unix.RENAME_EXCHANGE))
		}},
		{"a self-ignored .gitignore removed", func() {
			must(t, os.Remove(filepath.Join(repo, "self", ".gitignore")))
		}},
		{"ignore rules", func() {
			write(t, filepath.Join(repo, "x", ".gitignore"), "*.nothing\n")
		}},
		{"nested repository", func() {
			home := t.TempDir()
			hostGit(t, home, repo, "init", "-q", "tools")
			write(t, filepath.Join(repo, "tools", "p"), "p\n")
			hostGit(t, home, filepath.Join(repo, "tools"), "add", "p")
			hostGit(t, home, filepath.Join(repo, "tools"), "commit", "-q", "-m", "x")
		}},
		{"nested repository's commit", func() {
			home := t.TempDir()
			write(t, filepath.Join(repo, "tools", "p"), "p2\n")
			hostGit(t, home, filepath.Join(repo, "tools"), "commit", "-q", "-am", "y")
		}},
	}
	for _, st := range steps {
		id := record(t, s, Record{Start: time.Now()}, st.change)
		got := shadowGit(t, s, "rev-parse", "refs/sessions/"+id+"^{tree}")
		ref, _ := openStore(t, repo) // a fresh store: a full sweep of the same tree
		want := shadowGit(t, ref, "rev-parse", "refs/sessions/"+record(t, ref, Record{Start: time.Now()}, nil)+"^{tree}")
		if got != want {
			t.Errorf("after %q: the walk's record is tree %s, a full sweep's %s:\n%s\nvs\n%s", st.name, got, want,
				shadowGit(t, s, "ls-tree", "-r", got), shadowGit(t, ref, "ls-tree", "-r", want))
		}
	}
	if s.sweeps != 2 {
		t.Errorf("%d full sweeps, want 2 (the first record, the .gitignore removed)", s.sweeps)
	}
}

// TestWalkStagingNamesOnlyTheNew: a file added to or rewritten by rename in a
// directory the index knows is staged alone, not its directory: the check for a
// directory renamed over another finds every other entry the index's.
func TestWalkStagingNamesOnlyTheNew(t *testing.T) {
	repo := newRepo(t, map[string]string{"dir/a.txt": "a\n", "dir/sub/b.txt": "b\n", "dir/c.txt": "c\n", "top.txt": "t\n"})
	s, _ := openStore(t, repo)
	time.Sleep(60 * time.Millisecond) // past the threshold's slack: the files above are old
	record(t, s, Record{Start: time.Now()}, nil)
	st, ok := s.readStage()
	if !ok {
		t.Fatal("no stage state after a record")
	}
	write(t, filepath.Join(repo, "dir", "new.txt"), "n\n")
	write(t, filepath.Join(repo, "dir", "c.tmp"), "c2\n")
	must(t, os.Rename(filepath.Join(repo, "dir", "c.tmp"), filepath.Join(repo, "dir", "c.txt")))
	paths, err := s.changedPaths(st, walkOf(t, repo))
	must(t, err)
	if !slices.Equal(paths, []string{"dir/c.txt", "dir/new.txt"}) {
		t.Errorf("changed paths %q, want dir/c.txt and dir/new.txt alone", paths)
	}
}

// TestWalkStagingFallsBack: what the walk cannot vouch for is swept: an
// incomplete walk, an index some other Git wrote, no walk at all.
func TestWalkStagingFallsBack(t *testing.T) {
	repo := newRepo(t, map[string]string{"a.txt": "a\n"})
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, nil)
	base := s.sweeps

	w := walkOf(t, repo)
	w.Complete = false
	ss, err := s.BeginWalk(Record{Start: time.Now()}, w)
	must(t, err)
	must(t, ss.FinishWalk(Record{End: time.Now()}, nil))
	if s.sweeps != base+2 {
		t.Errorf("incomplete walk, then none: %d sweeps, want 2", s.sweeps-base)
	}

	// Another writer of the index: the stage state no longer describes it.
	write(t, filepath.Join(repo, "b.txt"), "b\n")
	wt := s.git
	wt.workTree = repo
	if _, err := wt.run(nil, "add", "b.txt"); err != nil {
		t.Fatal(err)
	}
	base = s.sweeps
	record(t, s, Record{Start: time.Now()}, nil)
	if s.sweeps != base+1 {
		t.Errorf("foreign index write: %d sweeps, want 1 (the start)", s.sweeps-base)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestWalkStagingTrustsWhatItStaged: a file a session changed just before its end
// is, for the next sessions, the index's own — not staged again while its ctime is
// within the threshold's slack — while a change made after that staging is still
// found, however soon.
func TestWalkStagingTrustsWhatItStaged(t *testing.T) {
	repo := newRepo(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n"})
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, nil)
	record(t, s, Record{Start: time.Now()}, func() {
		write(t, filepath.Join(repo, "a.txt"), "a2\n")
		write(t, filepath.Join(repo, "new.txt"), "n\n")
	})
	st, ok := s.readStage()
	if !ok {
		t.Fatal("no stage state after a record")
	}
	if paths, err := s.changedPaths(st, walkOf(t, repo)); err != nil || len(paths) != 0 {
		t.Errorf("right after the record: changed paths %q (%v), want none", paths, err)
	}
	// Same size, other content: found at once, whatever the clock's tick.
	write(t, filepath.Join(repo, "a.txt"), "a3\n")
	must(t, os.Chmod(filepath.Join(repo, "new.txt"), 0o755))
	if paths, err := s.changedPaths(st, walkOf(t, repo)); err != nil || !slices.Equal(paths, []string{"a.txt", "new.txt"}) {
		t.Errorf("after a rewrite and a chmod: changed paths %q (%v), want a.txt and new.txt", paths, err)
	}
	id := record(t, s, Record{Start: time.Now()}, nil)
	if got := shadowGit(t, s, "show", "refs/sessions/"+id+":a.txt"); got != "a3" {
		t.Errorf("recorded a.txt %q, want a3", got)
	}
}

// TestSameContent: the racy check reads what the index says is there, and nothing
// else: another content, size or mode, a FIFO, a symlink (at the path or above it)
// are "not the same", and it never blocks.
func TestSameContent(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "d", "f"), "hello\n")
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(fd)
	entry := func(rel string) (treewalk.Entry, indexEntry) {
		var st unix.Stat_t
		must(t, unix.Lstat(filepath.Join(dir, rel), &st))
		e := treewalk.Entry{Rel: rel, Mode: st.Mode & unix.S_IFMT, Ctime: st.Ctim.Nano(), Ino: uint32(st.Ino)}
		ie := indexEntry{path: rel, mode: 0o100644, ino: uint32(st.Ino), size: uint32(st.Size), ctime: st.Ctim.Nano()}
		copy(ie.oid[:], blobID("hello\n"))
		return e, ie
	}
	e, ie := entry("d/f")
	if !sameContent(fd, e, ie) {
		t.Error("the same content is not the same")
	}
	other := ie
	other.oid[0] ^= 1
	if sameContent(fd, e, other) {
		t.Error("another blob is the same")
	}
	other = ie
	other.mode = 0o100755
	if sameContent(fd, e, other) {
		t.Error("another mode is the same")
	}
	other = ie
	other.size++
	if sameContent(fd, e, other) {
		t.Error("another size is the same")
	}
	stale := e
	stale.Ctime--
	if sameContent(fd, stale, ie) {
		t.Error("a file whose ctime moved since the walk is the same")
	}
	must(t, unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	fe, fie := entry("fifo")
	fe.Mode = unix.S_IFREG
	if sameContent(fd, fe, fie) {
		t.Error("a FIFO is the same")
	}
	must(t, os.Symlink("d/f", filepath.Join(dir, "link")))
	if sameContent(fd, treewalk.Entry{Rel: "link", Mode: unix.S_IFREG, Ctime: e.Ctime, Ino: e.Ino}, ie) {
		t.Error("a symlink to the file is the same")
	}
	must(t, os.Symlink("d", filepath.Join(dir, "up")))
	if sameContent(fd, treewalk.Entry{Rel: "up/f", Mode: unix.S_IFREG, Ctime: e.Ctime, Ino: e.Ino}, ie) {
		t.Error("the file through a symlinked directory is the same")
	}
}

// blobID is Git's SHA-1 of a blob.
func blobID(content string) []byte {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00%s", len(content), content)
	return h.Sum(nil)
}

func TestIsGitignore(t *testing.T) {
	for rel, want := range map[string]bool{".gitignore": true, "a/.gitignore": true, "a/b/.gitignore": true,
		"x.gitignore": false, "a/x.gitignore": false, ".gitignore/a": false, "gitignore": false, "": false} {
		if got := isGitignore(rel); got != want || got != (path.Base(rel) == ".gitignore") {
			t.Errorf("isGitignore(%q) = %v, want %v", rel, got, want)
		}
	}
}
