package shadow

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/treewalk"
)

// TestEarlyIndexOnlyWhileItIsTheIndex: the index opened beside stageWalk's first
// steps stands for the index only while it is still that file. Replaced meanwhile
// (renamed over, as Git and the recorder write it), the staging must map the file
// now at the path: staged from the early mapping, it would write the old index's
// entries back over the new one's.
func TestEarlyIndexOnlyWhileItIsTheIndex(t *testing.T) {
	repo := newRepo(t, map[string]string{"a/x.txt": "x\n", "b/y.txt": "y\n"})
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, nil)
	indexPath := filepath.Join(s.Dir, "index")

	// Unchanged: the early mapping is the one taken.
	s.early = s.openIndexEarly()
	ix, _, release, err := s.takeIndex(indexPath)
	must(t, err)
	if ix != s.early.ix || !s.early.taken {
		t.Error("the early index was not taken though the index is unchanged")
	}
	ix.close()
	release()
	s.early.drop()

	// Replaced after the early open: another index (one more entry) renamed over it.
	s.early = s.openIndexEarly()
	<-s.early.done
	write(t, filepath.Join(repo, "c", "z.txt"), "z\n")
	shadowGit(t, s, "--work-tree="+repo, "add", "--", "c/z.txt")
	want, err := os.ReadFile(indexPath)
	must(t, err)
	ix, _, release, err = s.takeIndex(indexPath)
	must(t, err)
	if ix == s.early.ix || s.early.taken {
		t.Error("the early index was taken after the index was replaced")
	}
	if !bytes.Equal(ix.b, want) {
		t.Error("the index taken is not the file at the index's path")
	}
	ix.close()
	release()
	s.early.drop()
	s.early = nil
}

// TestTenFileEndTakesTheEarlyIndex: a record end of files edited in place stages
// from the index opened beside its first steps (the early open is what saves its
// time), and the record is a full sweep's.
func TestTenFileEndTakesTheEarlyIndex(t *testing.T) {
	files := map[string]string{}
	for _, d := range []string{"a", "b", "c"} {
		for _, f := range []string{"1", "2", "3"} {
			files[d+"/"+f+".txt"] = d + f + "\n"
		}
	}
	repo := newRepo(t, files)
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, nil)
	time.Sleep(1100 * time.Millisecond) // no entry in the next staging's clock slack
	ss, err := s.BeginWalk(Record{Start: time.Now()}, walkOf(t, repo))
	must(t, err)
	must(t, ss.Wait())
	for _, p := range []string{"a/1.txt", "b/2.txt", "c/3.txt"} {
		f, err := os.OpenFile(filepath.Join(repo, p), os.O_WRONLY|os.O_APPEND, 0)
		must(t, err)
		_, err = f.WriteString("more\n")
		must(t, err)
		must(t, f.Close())
	}
	taken, inPlace := earlyTaken.Load(), s.inPlace
	must(t, ss.FinishWalk(Record{End: time.Now()}, walkOf(t, repo)))
	if s.inPlace != inPlace+1 {
		t.Fatal("the edits were not staged in place")
	}
	if earlyTaken.Load() != taken+1 {
		t.Error("the staging in place did not take the index opened early")
	}
	if s.early != nil {
		t.Error("the early index outlived its staging")
	}
	got := shadowGit(t, s, "rev-parse", "refs/sessions/"+ss.ID()+"^{tree}")
	ref, _ := openStore(t, repo)
	if want := shadowGit(t, ref, "rev-parse", "refs/sessions/"+record(t, ref, Record{Start: time.Now()}, nil)+"^{tree}"); got != want {
		t.Errorf("end tree %s, a full sweep's %s", got, want)
	}
	shadowGit(t, s, "fsck", "--no-progress", "--no-dangling")
}

// TestAnyChangedSince: the early open is asked for when the walk holds an entry
// in the stage state's window that the last staging in place did not leave as it
// is, or a changed top; entries it left as they are (a previous session's) are no
// reason, nor is an unchanged tree.
func TestAnyChangedSince(t *testing.T) {
	clock := treewalk.Now()
	w := &treewalk.Walk{Clock: clock, Complete: true, RootCtime: clock.Real - 5e9, Entries: []treewalk.Entry{
		{Rel: "a", Mode: treewalk.ModeDir, Ctime: clock.Real - 5e9, Ino: 1},
		{Rel: "a/x", Mode: 0o100000, Ctime: clock.Real - 5e9, Ino: 2},
		{Rel: "a/y", Mode: 0o100000, Ctime: clock.Real - 1e9, Ino: 3},
	}}
	st := stageState{Clock: treewalk.Clock{Real: clock.Real - 2e9, Boot: clock.Boot - 2e9, BootID: clock.BootID}}
	threshold, ok := treewalk.Since(st.Clock, w.Clock, false)
	if !ok || threshold > clock.Real-1e9 || threshold <= clock.Real-5e9 {
		t.Fatalf("the test's clocks: threshold %d ok %v", threshold, ok)
	}
	if !anyChangedSince(st, w) {
		t.Error("a/y changed after the stage state's clock: not seen")
	}
	st.Recent = []recentEntry{{Path: "a/y", Ctime: clock.Real - 1e9, Ino: 3}}
	if anyChangedSince(st, w) {
		t.Error("a/y as the last staging left it counted as changed")
	}
	st.Recent[0].Ino = 4
	if !anyChangedSince(st, w) {
		t.Error("a/y, another inode than the last staging's, not seen")
	}
	st.Recent[0].Ino = 3
	w.RootCtime = clock.Real
	if !anyChangedSince(st, w) {
		t.Error("a changed top not seen")
	}
	w.RootCtime = clock.Real - 5e9
	w.Entries[2].Ctime = clock.Real - 5e9
	st.Recent = nil
	if anyChangedSince(st, w) {
		t.Error("an unchanged walk counted as changed")
	}
}
