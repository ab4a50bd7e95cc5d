package shadow

import (
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestInPlaceStagingIsGits: files edited in place are staged without Git
// (inplace.go), and the result is what `git add` would have left: the record's tree
// equals a full sweep's, the index's stat data are Git's own (diff-files finds
// nothing to refresh), the cache tree is rebuilt where it changed (the tree ids of
// untouched directories are kept) — across content edits at several depths, a
// same-size rewrite, a chmod, and names whose order differs between paths and
// trees ("a-b", "a.b", "a/"). Anything else falls back to `git add`: a new file, a
// file turned into a symlink, an edited .gitignore.
func TestInPlaceStagingIsGits(t *testing.T) {
	files := map[string]string{
		"a.txt": "a\n", "a-b/x.txt": "x\n", "a.b": "dot\n", "a/b.txt": "b\n", "a/c/d.txt": "d\n",
		"deep/1/2/3/f.txt": "f\n", "exe.sh": "#!/bin/sh\n", "same.txt": "1234\n", ".gitignore": "*.tmp\n",
	}
	for i := range 50 {
		files[fmt.Sprintf("other/%02d/g.txt", i)] = fmt.Sprintf("g%d\n", i)
	}
	repo := newRepo(t, files)
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, nil) // the first record: a sweep
	check := func(step string, wantInPlace int) {
		t.Helper()
		id := onlyLast(t, s)
		got := shadowGit(t, s, "rev-parse", "refs/sessions/"+id+"^{tree}")
		ref, _ := openStore(t, repo)
		want := shadowGit(t, ref, "rev-parse", "refs/sessions/"+record(t, ref, Record{Start: time.Now()}, nil)+"^{tree}")
		if got != want {
			t.Errorf("%s: recorded tree %s, a full sweep's %s:\n%s\nvs\n%s", step, got, want,
				shadowGit(t, s, "ls-tree", "-r", got), shadowGit(t, ref, "ls-tree", "-r", want))
		}
		if dirty := hostGit(t, t.TempDir(), repo, "--git-dir="+s.Dir, "--work-tree="+repo, "diff-files", "--name-only"); dirty != "" {
			t.Errorf("%s: the shadow index's stat data are not Git's for %q", step, dirty)
		}
		if s.inPlace != wantInPlace {
			t.Errorf("%s: %d stagings without Git, want %d", step, s.inPlace, wantInPlace)
		}
		shadowGit(t, s, "fsck", "--no-progress", "--no-dangling")
	}
	otherTree := shadowGit(t, s, "rev-parse", "refs/sessions/"+onlyLast(t, s)+":other")

	record(t, s, Record{Start: time.Now()}, func() {
		write(t, filepath.Join(repo, "a", "c", "d.txt"), "d2\n")
		write(t, filepath.Join(repo, "a-b", "x.txt"), "x2 longer\n")
		write(t, filepath.Join(repo, "deep", "1", "2", "3", "f.txt"), "")
		write(t, filepath.Join(repo, "same.txt"), "5678\n")
		must(t, os.Chmod(filepath.Join(repo, "exe.sh"), 0o755))
	})
	check("edits in place", 1)
	if got := shadowGit(t, s, "rev-parse", "refs/sessions/"+onlyLast(t, s)+":other"); got != otherTree {
		t.Errorf("an untouched directory's tree changed: %s, was %s", got, otherTree)
	}
	if got := shadowGit(t, s, "ls-tree", "refs/sessions/"+onlyLast(t, s), "exe.sh"); !strings.HasPrefix(got, "100755 ") {
		t.Errorf("exe.sh recorded as %q, want mode 100755", got)
	}

	for _, c := range []struct {
		name   string
		change func()
	}{
		{"an edit and a new file", func() {
			write(t, filepath.Join(repo, "a.txt"), "a3\n")
			write(t, filepath.Join(repo, "a", "new.txt"), "n\n")
		}},
		{"a file turned into a symlink", func() {
			must(t, os.Remove(filepath.Join(repo, "a.b")))
			must(t, os.Symlink("a.txt", filepath.Join(repo, "a.b")))
		}},
		{"an edited .gitignore", func() {
			write(t, filepath.Join(repo, ".gitignore"), "*.nothing\n")
		}},
	} {
		record(t, s, Record{Start: time.Now()}, c.change)
		check(c.name, 1)
	}
	record(t, s, Record{Start: time.Now()}, func() { write(t, filepath.Join(repo, "a", "b.txt"), "b4\n") })
	check("an edit again", 2)

	// The cache tree written is Git's own: Git's write-tree from the same entries
	// without one writes the same extension.
	idx, err := os.ReadFile(filepath.Join(s.Dir, "index"))
	must(t, err)
	ours, bare := splitCacheTree(t, idx)
	if ours == nil {
		t.Fatal("no cache tree in the index")
	}
	tmp := filepath.Join(t.TempDir(), "index")
	must(t, os.WriteFile(tmp, bare, 0o644))
	cmd := exec.Command("git", "--git-dir="+s.Dir, "write-tree")
	cmd.Env = append(os.Environ(), "GIT_INDEX_FILE="+tmp, "GIT_CONFIG_NOSYSTEM=1", "HOME="+t.TempDir())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git write-tree: %v: %s", err, out)
	}
	gits, err := os.ReadFile(tmp)
	must(t, err)
	if theirs, _ := splitCacheTree(t, gits); !bytes.Equal(ours, theirs) {
		t.Errorf("cache tree:\nours %q\nGit's %q", ours, theirs)
	}
}

// splitCacheTree returns the TREE extension's data of the index b, and b without it
// (its checksum made again).
func splitCacheTree(t *testing.T, b []byte) (tree, without []byte) {
	t.Helper()
	body := b[:len(b)-20]
	off := 12
	for range int(binary.BigEndian.Uint32(b[8:12])) {
		flags := binary.BigEndian.Uint16(body[off+60 : off+62])
		fixed := 62
		if flags&0x4000 != 0 {
			fixed += 2
		}
		end := bytes.IndexByte(body[off+fixed:], 0)
		off += (fixed + end + 8) &^ 7
	}
	without = bytes.Clone(body[:off])
	for e := off; e < len(body); {
		size := int(binary.BigEndian.Uint32(body[e+4 : e+8]))
		if string(body[e:e+4]) == "TREE" {
			tree = body[e+8 : e+8+size]
		} else {
			without = append(without, body[e:e+8+size]...)
		}
		e += 8 + size
	}
	sum := sha1.Sum(without)
	return tree, append(without, sum[:]...)
}

// onlyLast is the id of the newest session of s.
func onlyLast(t *testing.T, s *Store) string {
	t.Helper()
	recs, err := s.Sessions()
	if err != nil || len(recs) == 0 {
		t.Fatalf("sessions: %v (%d)", err, len(recs))
	}
	newest := recs[0]
	for _, r := range recs {
		if r.Start.After(newest.Start) {
			newest = r
		}
	}
	return newest.ID
}

// TestInPlaceRefusesDamagedIndex: an index cut short anywhere (its checksum made
// right, so that only the parser stands between it and a panic), with a bad
// checksum, or with an extension it does not know, is left to Git, untouched.
func TestInPlaceRefusesDamagedIndex(t *testing.T) {
	repo := newRepo(t, map[string]string{"a.txt": "a\n", "d/b.txt": "b\n", "d/e/c.txt": "c\n"})
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, nil)
	write(t, filepath.Join(repo, "d", "e", "c.txt"), "c2\n")
	indexPath := filepath.Join(s.Dir, "index")
	orig, err := os.ReadFile(indexPath)
	must(t, err)
	try := func(name string, b []byte) {
		t.Helper()
		must(t, os.WriteFile(indexPath, b, 0o644))
		if _, _, err := s.stageInPlace([]string{"d/e/c.txt"}); err == nil {
			return // what is left is a well-formed index (the cut fell between extensions)
		}
		if now, _ := os.ReadFile(indexPath); !bytes.Equal(now, b) {
			t.Errorf("%s: refused, but the index changed", name)
		}
	}
	body := orig[:len(orig)-20]
	for cut := 0; cut < len(body); cut++ {
		b := bytes.Clone(body[:cut])
		sum := sha1.Sum(b)
		try(fmt.Sprintf("cut at %d", cut), append(b, sum[:]...))
	}
	bad := bytes.Clone(orig)
	bad[len(bad)-1] ^= 1
	try("bad checksum", bad)
	b := append(bytes.Clone(body), "XTRA\x00\x00\x00\x01z"...)
	sum := sha1.Sum(b)
	b = append(b, sum[:]...)
	must(t, os.WriteFile(indexPath, b, 0o644))
	if _, _, err := s.stageInPlace([]string{"d/e/c.txt"}); err == nil {
		t.Error("an unknown extension was not refused")
	}
	must(t, os.WriteFile(indexPath, orig, 0o644))
	if tree, _, err := s.stageInPlace([]string{"d/e/c.txt"}); err != nil || tree == "" {
		t.Errorf("the intact index: %q, %v", tree, err)
	}
}

// TestUnchangedStagingMovesTheClock: a file added just before a session's end is
// within the next staging's clock slack; telling it is unchanged takes the index,
// once: that staging moves the stage state's clock to its walk's, so the one after
// reads nothing — and a change made after that is still found. (A new file: Git
// stages it, and the stage state keeps no entry of it, as it does of files edited
// in place; TestRecentEntriesAreTheIndexs.)
func TestUnchangedStagingMovesTheClock(t *testing.T) {
	repo := newRepo(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n"})
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, nil)
	record(t, s, Record{Start: time.Now()}, func() { write(t, filepath.Join(repo, "c.txt"), "c\n") })
	before, ok := s.readStage()
	if !ok {
		t.Fatal("no stage state")
	}
	if paths, err := s.changedPaths(before, walkOf(t, repo)); err != nil || len(paths) != 0 {
		t.Fatalf("changed paths %q, %v; want none", paths, err)
	}
	if !s.indexRead {
		t.Skip("c.txt's change fell outside the clock slack (a stall of 50 ms): nothing to show")
	}
	// Past the slack (50 ms), so that the moved clock leaves a.txt behind; then its
	// start reads the index and moves the clock, its end reads nothing.
	time.Sleep(100 * time.Millisecond)
	record(t, s, Record{Start: time.Now()}, nil)
	if s.indexRead {
		t.Error("the staging after the one that cleared a.txt read the index again")
	}
	after, _ := s.readStage()
	if after.Clock.Real <= before.Clock.Real || after.Added != before.Added || after.Tree != before.Tree {
		t.Errorf("stage state %+v after %+v: want a later clock, the same Added and tree", after, before)
	}
	id := record(t, s, Record{Start: time.Now()}, func() { write(t, filepath.Join(repo, "b.txt"), "b2\n") })
	if got := shadowGit(t, s, "show", "refs/sessions/"+id+":b.txt"); got != "b2" {
		t.Errorf("b.txt recorded as %q after the clock moved", got)
	}
}

// TestRecentEntriesAreTheIndexs: the entries the stage state keeps of the files
// an in-place staging wrote are the index's, and the next staging, with those
// files in its clock window, tells from them without reading the index: nothing
// changed, or what changed again.
func TestRecentEntriesAreTheIndexs(t *testing.T) {
	repo := newRepo(t, map[string]string{"a.txt": "a\n", "d/b.txt": "b\n", "z": "z\n"})
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, nil)
	time.Sleep(100 * time.Millisecond) // out of the next staging's slack
	inPlace := s.inPlace
	record(t, s, Record{Start: time.Now()}, func() {
		write(t, filepath.Join(repo, "a.txt"), "a2\n")
		write(t, filepath.Join(repo, "d/b.txt"), "b2\n")
	})
	if s.inPlace != inPlace+1 {
		t.Fatal("the edits were not staged in place")
	}
	st, ok := s.readStage()
	if !ok || len(st.Recent) != 2 {
		t.Fatalf("stage state %v, recent %+v: want the two files edited", ok, st.Recent)
	}
	want := map[string]bool{}
	for _, r := range st.Recent {
		want[r.Path] = true
	}
	idx, err := readIndexPaths(filepath.Join(s.Dir, "index"), want)
	must(t, err)
	kept, ok := recentIndex(st.Recent, want)
	if !ok || !reflect.DeepEqual(kept, idx) {
		t.Fatalf("recent entries %+v, the index's %+v", kept, idx)
	}
	// The next staging: the two files are in its window (changed just before the
	// last one's clock); the stage state tells they are the index's.
	if paths, err := s.changedPaths(st, walkOf(t, repo)); err != nil || len(paths) != 0 || s.indexRead {
		t.Fatalf("changed paths %q, %v, index read %v; want none, without the index", paths, err, s.indexRead)
	}
	write(t, filepath.Join(repo, "a.txt"), "a3\n")
	if paths, err := s.changedPaths(st, walkOf(t, repo)); err != nil || !reflect.DeepEqual(paths, []string{"a.txt"}) || s.indexRead {
		t.Fatalf("changed paths %q, %v, index read %v; want a.txt, without the index", paths, err, s.indexRead)
	}
	id := record(t, s, Record{Start: time.Now()}, nil)
	if got := shadowGit(t, s, "show", "refs/sessions/"+id+":a.txt"); got != "a3" {
		t.Errorf("a.txt recorded as %q", got)
	}
}

// TestReadIndexPaths: the entries read for a few paths are the whole index's at
// those paths; a path the index does not hold is absent.
func TestReadIndexPaths(t *testing.T) {
	repo := newRepo(t, map[string]string{"a.txt": "a\n", "d/b.txt": "b\n", "d/e/c.txt": "c\n", "z": "z\n"})
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, nil)
	all, err := readIndex(filepath.Join(s.Dir, "index"))
	must(t, err)
	few, err := readIndexPaths(filepath.Join(s.Dir, "index"), map[string]bool{"d/e/c.txt": true, "z": true, "missing": true})
	must(t, err)
	if len(few) != 2 {
		t.Fatalf("%d entries for 2 tracked paths: %v", len(few), few)
	}
	for _, e := range all {
		if got, ok := few[e.path]; ok && got != e {
			t.Errorf("%s: %+v, the whole index says %+v", e.path, got, e)
		}
	}
}

// TestInPlaceCountsAsDiffTree: a session whose edits were all staged in place is
// counted by the staging itself, and the count is diff-tree's: a rewrite to the
// same content is no change, a mode change is one.
func TestInPlaceCountsAsDiffTree(t *testing.T) {
	repo := newRepo(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n", "c.sh": "echo\n", "d/e.txt": "e\n"})
	s, state := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, nil)
	time.Sleep(1100 * time.Millisecond) // beyond the next staging's clock slack
	inPlace := s.inPlace
	id := record(t, s, Record{Start: time.Now()}, func() {
		write(t, filepath.Join(repo, "a.txt"), "a2\n")
		write(t, filepath.Join(repo, "b.txt"), "b\n") // the same content again
		must(t, os.Chmod(filepath.Join(repo, "c.sh"), 0o755))
		write(t, filepath.Join(repo, "d/e.txt"), "e2\n")
	})
	if s.inPlace != inPlace+1 {
		t.Fatalf("in-place stagings %d, want %d: the edits went to Git", s.inPlace, inPlace+1)
	}
	if s.diffTrees != 0 {
		t.Errorf("%d diff-tree processes: the in-place staging's count was not used", s.diffTrees)
	}
	_, rec, err := Find(state, id)
	must(t, err)
	want, _, err := s.countChanges(rec.StartCommit, rec.EndCommit)
	must(t, err)
	if rec.Files != want || want != (Files{Changed: 3}) {
		t.Errorf("files %+v, diff-tree counts %+v, want 3 changed", rec.Files, want)
	}
}

// TestInPlaceIndexNamesOnlyWrittenObjects: the objects a staging in place writes
// beside its other work (objwriter.go) are all on disk before the new index names
// them; when one cannot be written the staging is refused and the index is the
// one before, with no lock file left.
func TestInPlaceIndexNamesOnlyWrittenObjects(t *testing.T) {
	repo := newRepo(t, map[string]string{"a/x.txt": "x\n", "b/y.txt": "y\n"})
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, nil)
	// New content whose blob's fan-out directory does not exist yet: a file put
	// there makes the blob's write fail (ENOTDIR, whoever runs the test).
	var content, fan string
	for i := 0; ; i++ {
		content = fmt.Sprintf("x%d\n", i)
		_, id := objectID("blob", []byte(content))
		fan = filepath.Join(s.Dir, "objects", id[:2])
		if _, err := os.Lstat(fan); os.IsNotExist(err) {
			break
		}
	}
	write(t, fan, "not a directory\n")
	write(t, filepath.Join(repo, "a", "x.txt"), content)
	indexPath := filepath.Join(s.Dir, "index")
	before, err := os.ReadFile(indexPath)
	must(t, err)
	if _, _, err := s.stageInPlace([]string{"a/x.txt"}); err == nil {
		t.Fatal("staged in place with its blob unwritten")
	}
	after, err := os.ReadFile(indexPath)
	must(t, err)
	if !bytes.Equal(after, before) {
		t.Error("the index changed though the staging was refused")
	}
	if _, err := os.Lstat(indexPath + ".lock"); !os.IsNotExist(err) {
		t.Errorf("index.lock left behind: %v", err)
	}
	// Once the object can be written, the same staging goes through.
	must(t, os.Remove(fan))
	if _, _, err := s.stageInPlace([]string{"a/x.txt"}); err != nil {
		t.Fatalf("staging after the fan-out was freed: %v", err)
	}
	shadowGit(t, s, "fsck", "--no-progress", "--no-dangling")
}

// TestBuildRefusesAnIndexOutOfOrder: the trees of an in-place staging are built
// from the index's entries in index order, a subtree's end found by binary search
// (inplace.go's build). An index whose entries are not sorted — here a/x, b/y, c/w,
// a/z under a cache tree that lists a, b, c and d — must be refused, not written as
// a tree that names a twice: the count of subtrees alone (four met, four listed)
// let it through.
func TestBuildRefusesAnIndexOutOfOrder(t *testing.T) {
	s, _ := openStore(t, newRepo(t, map[string]string{"f": "f\n"}))
	entry := func(name string) []byte {
		e := make([]byte, 62, (62+len(name)+8)&^7)
		binary.BigEndian.PutUint32(e[24:28], 0o100644)
		e[40] = 1 // some blob id
		binary.BigEndian.PutUint16(e[60:62], uint16(len(name)))
		e = append(e, name...)
		return append(e, make([]byte, cap(e)-len(e))...)
	}
	build := func(names ...string) error {
		x := indexEntries{patched: map[int][]byte{}}
		for _, n := range names {
			x.off = append(x.off, uint32(len(x.b)))
			x.b = append(x.b, entry(n)...)
		}
		root := &ctNode{entries: -1}
		for _, d := range []string{"a", "b", "c", "d"} {
			root.children = append(root.children, &ctNode{name: d, entries: -1})
		}
		objs := s.startObjectWriter()
		defer objs.wait()
		_, err := s.build(root, x, 0, len(x.off), "", &treeBufs{objs: objs})
		return err
	}
	if err := build("a/x", "b/y", "c/w", "a/z"); err == nil {
		t.Error("an index out of order was built into a tree")
	}
	if err := build("a/x", "a/z", "b/y", "c/w", "d/v"); err != nil {
		t.Errorf("entries in order: %v", err)
	}
	if err := build("a/x", "a/z", "b/y", "c/w"); err == nil {
		t.Error("a subtree of the cache tree without entries was not refused")
	}
}

// TestInPlaceLeavesAGitsLockAlone: the new index is written through index.lock,
// created exclusively before the copy of the old one starts. A lock some Git holds
// refuses the staging in place, and stays as it was: the recorder removes only the
// lock file it made.
func TestInPlaceLeavesAGitsLockAlone(t *testing.T) {
	repo := newRepo(t, map[string]string{"a/x.txt": "x\n", "b/y.txt": "y\n"})
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, nil)
	indexPath := filepath.Join(s.Dir, "index")
	write(t, indexPath+".lock", "a Git's index being written\n")
	write(t, filepath.Join(repo, "a", "x.txt"), "edited\n")
	before, err := os.ReadFile(indexPath)
	must(t, err)
	if _, _, err := s.stageInPlace([]string{"a/x.txt"}); err == nil {
		t.Fatal("staged in place while a Git held index.lock")
	}
	if after, err := os.ReadFile(indexPath); err != nil || !bytes.Equal(after, before) {
		t.Errorf("the index changed though the staging was refused (%v)", err)
	}
	if lock, err := os.ReadFile(indexPath + ".lock"); err != nil || string(lock) != "a Git's index being written\n" {
		t.Errorf("the Git's index.lock: %q, %v; want it as it was", lock, err)
	}
}
