package shadow

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// sameSecond runs stage between writing path's first content and its second, of
// the same size, so that both writes (and whatever stage recorded of the first)
// fall within one second of the wall clock: Git's stat check, which compares
// whole seconds, cannot tell them apart (racy.go). It retries on a loaded machine
// until the three fall in one second, and returns with that second over.
func sameSecond(t *testing.T, path string, stage func()) {
	t.Helper()
	for try := 0; ; try++ {
		now := time.Now()
		time.Sleep(now.Truncate(time.Second).Add(time.Second + 5*time.Millisecond).Sub(now))
		write(t, path, "old\n")
		var first unix.Stat_t
		must(t, unix.Lstat(path, &first))
		stage()
		write(t, path, "new\n")
		var second unix.Stat_t
		must(t, unix.Lstat(path, &second))
		if first.Ctim.Sec == second.Ctim.Sec && first.Ino == second.Ino {
			time.Sleep(time.Until(time.Unix(second.Ctim.Sec+1, 5_000_000)))
			return
		}
		if try == 20 {
			t.Fatal("could not make two writes within one second in 20 tries")
		}
	}
}

// stagedBlob is the blob the shadow index holds at rel.
func stagedBlob(t *testing.T, s *Store, rel string) string {
	t.Helper()
	f := strings.Fields(shadowGit(t, s, "ls-files", "-s", "--", rel))
	if len(f) < 2 {
		t.Fatalf("%s is not in the shadow index", rel)
	}
	return f[1]
}

// The start's tree is written (write-tree) while the sandbox runs; write-tree
// rewrites the index without a working tree to check racy entries against. An
// edit in the second of the file's staged stat, with the index rewritten in a
// later second, must still be staged by the next sweep.
func TestWriteTreeKeepsRacyEntriesRacy(t *testing.T) {
	repo := newRepo(t, map[string]string{"keep": "k\n"})
	s, _ := openStore(t, repo)
	f := filepath.Join(repo, "f")
	var st staged
	sameSecond(t, f, func() {
		var err error
		st, _, err = s.stageWalk(nil) // the first record: a full sweep
		must(t, err)
	})
	if _, err := s.writeTree(st); err != nil { // a second later
		t.Fatal(err)
	}
	if _, err := s.stage(nil); err != nil {
		t.Fatal(err)
	}
	if got, want := stagedBlob(t, s, "f"), hex.EncodeToString(blobID("new\n")); got != want {
		t.Errorf("after the sweep the index holds %s for f, want the edited content's %s", got, want)
	}
}

// The recorder's own index writes (files edited in place, staged in Go) keep the
// entries racy against the index before them racy too.
func TestInPlaceStagingKeepsRacyEntriesRacy(t *testing.T) {
	repo := newRepo(t, map[string]string{"keep": "k\n"})
	s, _ := openStore(t, repo)
	f := filepath.Join(repo, "f")
	sameSecond(t, f, func() {
		st, _, err := s.stageWalk(walkOf(t, repo))
		must(t, err)
		_, err = s.writeTree(st)
		must(t, err)
	})
	write(t, filepath.Join(repo, "keep"), "K\n") // a second later
	if _, _, err := s.stageInPlace([]string{"keep"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.stage(nil); err != nil { // Git's sweep, on its stat check alone
		t.Fatal(err)
	}
	if got, want := stagedBlob(t, s, "f"), hex.EncodeToString(blobID("new\n")); got != want {
		t.Errorf("after the sweep the index holds %s for f, want the edited content's %s", got, want)
	}
}

// An mtime is the sandbox's to set: a file whose mtime was set back is never racy
// for Git, and an edit in the second of its ctime with the mtime set back again
// passes Git's stat check. The walk sees the ctime to the nanosecond; what it saw
// changed must be staged, by a limited `git add` and by a full sweep alike.
func TestBackdatedSameSecondEditStaged(t *testing.T) {
	past := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, full := range []bool{false, true} {
		name := "limited add"
		if full {
			name = "full sweep"
		}
		t.Run(name, func(t *testing.T) {
			repo := newRepo(t, map[string]string{"keep": "k\n"})
			s, _ := openStore(t, repo)
			f := filepath.Join(repo, "f")
			backdate := func() { must(t, os.Chtimes(f, past, past)) }
			var st staged
			sameSecond(t, f, func() {
				backdate()
				var err error
				st, _, err = s.stageWalk(walkOf(t, repo))
				must(t, err)
				_, err = s.writeTree(st)
				must(t, err)
			})
			backdate()
			write(t, filepath.Join(repo, "new-file"), "n\n") // no in-place staging: Git adds
			if full {
				s.dropStage()
			}
			sweeps := s.sweeps
			st, _, err := s.stageWalk(walkOf(t, repo))
			must(t, err)
			if _, err := s.writeTree(st); err != nil {
				t.Fatal(err)
			}
			if full != (s.sweeps > sweeps) {
				t.Fatalf("full sweeps: %d, want the second staging to be %s", s.sweeps, name)
			}
			if got, want := stagedBlob(t, s, "f"), hex.EncodeToString(blobID("new\n")); got != want {
				t.Errorf("the index holds %s for f, want the edited content's %s", got, want)
			}
		})
	}
}

// An empty working tree leaves no index behind Git's first `git add`: its start
// state is the empty tree, and what the session adds is counted against it.
func TestEmptyRepositoryRecorded(t *testing.T) {
	repo := newRepo(t, nil)
	s, state := openStore(t, repo)
	id := record(t, s, Record{Start: time.Now()}, func() { write(t, filepath.Join(repo, "first.txt"), "1\n") })
	_, rec, err := Find(state, id)
	must(t, err)
	if rec.StartCommit == "" || rec.Files != (Files{Added: 1}) {
		t.Errorf("start commit %q, files %+v; want a start state and one file added (notes %q)", rec.StartCommit, rec.Files, rec.Notes)
	}
}
