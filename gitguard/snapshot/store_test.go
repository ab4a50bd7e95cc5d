package snapshot

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// noRacy trusts the stat cache for files written just now, as it would a second
// later: the tests create their fixtures and save at once.
func noRacy(t *testing.T) {
	old := racyWindow
	racyWindow = -time.Hour
	t.Cleanup(func() { racyWindow = old })
}

func storeSave(t *testing.T, repo, store string, opts SnapshotOptions) *Snapshot {
	t.Helper()
	opts.Repo, opts.Dir = repo, store
	s, err := SaveStored(opts)
	if err != nil {
		t.Fatalf("SaveStored: %v", err)
	}
	if s == nil {
		t.Fatal("SaveStored: no snapshot of a Git work tree")
	}
	return s
}

// blocks is the disk (st_blocks) of everything below dir.
func blocks(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil {
			n += fi.Sys().(*syscall.Stat_t).Blocks * 512
		}
		return nil
	})
	return n
}

func blobCount(t *testing.T, store, repo string) int {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(store, storeKey(repo), "blobs", "??", "*"))
	return len(m)
}

func randomFile(t *testing.T, path string, n int) {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	os.Remove(path) // mode 0444: only root could write it again
	if err := os.WriteFile(path, b, 0o444); err != nil {
		t.Fatal(err)
	}
}

// TestStoredRoundTrip: every layout of TestSnapshotLayouts saves into the store and
// restores byte for byte, modes included, and Git reads the result.
func TestStoredRoundTrip(t *testing.T) {
	for _, tc := range snapCases {
		t.Run(tc.name, func(t *testing.T) {
			base := tmpDir(t)
			repo, gitDir, commonDir, dotGit := tc.setup(t, base)
			store := filepath.Join(base, "store")
			s := storeSave(t, repo, store, SnapshotOptions{Version: "t"})
			if s.Manifest.GitDir != gitDir || s.Manifest.GitCommonDir != commonDir || s.Manifest.DotGitFile != dotGit {
				t.Errorf("manifest %+v: want gitdir %s, common %s, pointer %q", s.Manifest, gitDir, commonDir, dotGit)
			}
			checkHead(t, tc, repo, s.Manifest)
			into := filepath.Join(base, "restored")
			res, err := RestoreStored(s.Path, into)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Skipped) != 0 {
				t.Errorf("skipped %v", res.Skipped)
			}
			compareTrees(t, "common dir", diskTree(t, commonDir), diskTree(t, filepath.Join(into, ".git")))
			if gitDir != commonDir {
				compareTrees(t, "worktree gitdir", diskTree(t, gitDir), diskTree(t, filepath.Join(into, "git-worktree")))
			}
			if dotGit != "" {
				want, _ := os.ReadFile(dotGit)
				if got, err := os.ReadFile(filepath.Join(into, "dotgit")); err != nil || string(got) != string(want) {
					t.Errorf("dotgit %q, %v; want %q", got, err, want)
				}
			}
			if !tc.unborn && gitDir == commonDir && dotGit == "" {
				if got, want := testenv.LocalGit(t, into, "rev-parse", "HEAD"), testenv.LocalGit(t, repo, "rev-parse", "HEAD"); got != want {
					t.Errorf("restored HEAD %s, want %s", got, want)
				}
				testenv.LocalGit(t, into, "fsck", "--no-progress")
			}
			if _, err := CheckStored(s.Path); err != nil {
				t.Errorf("CheckStored: %v", err)
			}
		})
	}
}

// TestStoredUnchangedWritesNothing: twenty saves of unchanged metadata name the
// last record again and add nothing to the store (no record, no stat cache read);
// N bytes of new objects cost about N.
func TestStoredUnchangedWritesNothing(t *testing.T) {
	noRacy(t)
	base := tmpDir(t)
	repo := snapRepo(t, filepath.Join(base, "repo"))
	randomFile(t, filepath.Join(repo, ".git/objects/pack/pack-big.pack"), 4<<20)
	store := filepath.Join(base, "store")
	first := storeSave(t, repo, store, SnapshotOptions{})
	if first.NewBytes < 4<<20 || first.Unchanged {
		t.Fatalf("first save stored %d new bytes (unchanged %v), want the whole 4 MiB pack at least", first.NewBytes, first.Unchanged)
	}
	before := blocks(t, store)
	for i := 0; i < 20; i++ {
		s := storeSave(t, repo, store, SnapshotOptions{})
		if s.NewBytes != 0 || !s.Unchanged || s.Path != first.Path {
			t.Fatalf("save %d of unchanged metadata: %d new bytes, unchanged %v, record %s; want 0, true and %s", i, s.NewBytes, s.Unchanged, s.Path, first.Path)
		}
		if s.Manifest.HeadCommit != first.Manifest.HeadCommit || s.Manifest.Repo != repo {
			t.Fatalf("save %d: manifest %+v", i, s.Manifest)
		}
	}
	if grew := blocks(t, store) - before; grew != 0 {
		t.Errorf("twenty unchanged saves added %d bytes, want none", grew)
	}
	recs, _ := filepath.Glob(filepath.Join(store, storeKey(repo), "snaps", "*"+RecordSuffix))
	if len(recs) != 1 {
		t.Errorf("%d records, want 1", len(recs))
	}
	if _, err := CheckStored(first.Path); err != nil {
		t.Errorf("the record named again is broken: %v", err)
	}

	before = blocks(t, store)
	randomFile(t, filepath.Join(repo, ".git/objects/pack/pack-new.pack"), 1<<20)
	s := storeSave(t, repo, store, SnapshotOptions{})
	grew := blocks(t, store) - before
	if s.Unchanged || s.NewBytes != 1<<20 || grew < 1<<20 || grew > 1<<20+256<<10 {
		t.Errorf("1 MiB of new objects: unchanged %v, %d new bytes, store grew %d; want a new record of 1 MiB and about that", s.Unchanged, s.NewBytes, grew)
	}
}

// TestStoredUnchangedSeesEveryChange: after a save whose listing vouches for its
// record, each kind of change to .git makes the next save walk and write a record
// of its own — and so does a record gone from the store, or a listing taken
// within the racy window.
func TestStoredUnchangedSeesEveryChange(t *testing.T) {
	noRacy(t)
	base := tmpDir(t)
	repo := snapRepo(t, filepath.Join(base, "repo"))
	git := filepath.Join(repo, ".git")
	desc := filepath.Join(git, "description")
	for _, c := range []struct {
		name   string
		change func()
	}{
		{"a file rewritten in place, same size, mtime put back", func() {
			fi, _ := os.Stat(desc)
			writeFile(t, desc, strings.Repeat("x", int(fi.Size())))
			os.Chtimes(desc, fi.ModTime(), fi.ModTime())
		}},
		{"a file's mode", func() { os.Chmod(desc, 0o600) }},
		{"a new file two directories down", func() { writeFile(t, filepath.Join(git, "refs/tags/new"), "x\n") }},
		{"a file removed", func() { os.Remove(filepath.Join(git, "refs/tags/new")) }},
		{"a directory's mode", func() { os.Chmod(filepath.Join(git, "refs/tags"), 0o700) }},
		{"a file swapped for a symlink", func() {
			os.Remove(desc)
			os.Symlink("HEAD", desc)
		}},
		{"the record removed from the store", func() {
			recs, _ := filepath.Glob(filepath.Join(base, "store", storeKey(repo), "snaps", "*"+RecordSuffix))
			for _, r := range recs {
				os.Remove(r)
			}
		}},
	} {
		store := filepath.Join(base, "store")
		before := storeSave(t, repo, store, SnapshotOptions{})
		if again := storeSave(t, repo, store, SnapshotOptions{}); !again.Unchanged || again.Path != before.Path {
			t.Fatalf("%s: the save before the change did not name its record again", c.name)
		}
		time.Sleep(10 * time.Millisecond) // a later ctime tick
		c.change()
		s := storeSave(t, repo, store, SnapshotOptions{})
		if s.Unchanged || s.Path == before.Path {
			t.Errorf("%s: the save named the old record %s again", c.name, before.Path)
			continue
		}
		if _, err := CheckStored(s.Path); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}

	// Within the racy window a change could keep its ctime: no listing is kept.
	racyWindow = time.Hour
	store := filepath.Join(base, "store-racy")
	first := storeSave(t, repo, store, SnapshotOptions{})
	if s := storeSave(t, repo, store, SnapshotOptions{}); s.Unchanged || s.Path == first.Path {
		t.Error("a save whose entries were all within the racy window vouched for its record")
	}
}

// TestStoredUnchangedKeepsSkipped: what a record left out (a FIFO in .git) is
// named again when the record is named again.
func TestStoredUnchangedKeepsSkipped(t *testing.T) {
	noRacy(t)
	base := tmpDir(t)
	repo := snapRepo(t, filepath.Join(base, "repo"))
	if err := syscall.Mkfifo(filepath.Join(repo, ".git", "pipe"), 0o600); err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(base, "store")
	first := storeSave(t, repo, store, SnapshotOptions{})
	s := storeSave(t, repo, store, SnapshotOptions{})
	if !s.Unchanged || len(s.Skipped) != 1 || !strings.Contains(s.Skipped[0], "a FIFO") || !slices.Equal(s.Skipped, first.Skipped) {
		t.Errorf("unchanged %v, skipped %q; want true and the FIFO named as by the first save (%q)", s.Unchanged, s.Skipped, first.Skipped)
	}
}

// TestStoredStatCacheSeesRewrites: a file rewritten in place with the same size and
// its old mtime put back is read again (its ctime changed), and the restore has the
// new content.
func TestStoredStatCacheSeesRewrites(t *testing.T) {
	noRacy(t)
	base := tmpDir(t)
	repo := snapRepo(t, filepath.Join(base, "repo"))
	cfg := filepath.Join(repo, ".git/description")
	writeFile(t, cfg, "aaaa\n")
	fi, _ := os.Stat(cfg)
	store := filepath.Join(base, "store")
	storeSave(t, repo, store, SnapshotOptions{})
	time.Sleep(20 * time.Millisecond) // a later ctime tick
	writeFile(t, cfg, "bbbb\n")
	os.Chtimes(cfg, fi.ModTime(), fi.ModTime())
	s := storeSave(t, repo, store, SnapshotOptions{})
	into := filepath.Join(base, "restored")
	if _, err := RestoreStored(s.Path, into); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(into, ".git/description")); string(b) != "bbbb\n" {
		t.Errorf("restored %q, want the rewritten content", b)
	}
}

// TestStoredRestoreBrokenPieces: a missing or changed blob, a changed tree and a
// changed record each fail the check and the restore with an error naming the
// piece, and the restore leaves nothing behind.
func TestStoredRestoreBrokenPieces(t *testing.T) {
	cases := []struct {
		name   string
		break_ func(t *testing.T, store, repo, rec string) string // returns what the error must name
	}{
		{"missing blob", func(t *testing.T, store, repo, rec string) string {
			p, h := blobOf(t, store, repo, "HEAD")
			os.Remove(p)
			return h
		}},
		{"changed blob", func(t *testing.T, store, repo, rec string) string {
			p, h := blobOf(t, store, repo, "HEAD")
			os.Chmod(p, 0o600)
			writeFile(t, p, "ref: refs/heads/evil\n")
			return h
		}},
		{"changed tree", func(t *testing.T, store, repo, rec string) string {
			r, err := readRecord(rec)
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(store, storeKey(repo), "blobs", r.Common[:2], r.Common[2:])
			b, _ := os.ReadFile(p)
			os.Chmod(p, 0o600)
			os.WriteFile(p, append(b, []byte("f 644 0 0 "+strings.Repeat("0", 64)+` "planted"`+"\n")...), 0o600)
			return r.Common
		}},
		{"changed record", func(t *testing.T, store, repo, rec string) string {
			b, _ := os.ReadFile(rec)
			os.WriteFile(rec, []byte(strings.Replace(string(b), `"common": "`, `"common": "x`, 1)), 0o600)
			return rec
		}},
	}
	noRacy(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base := tmpDir(t)
			repo := snapRepo(t, filepath.Join(base, "repo"))
			store := filepath.Join(base, "store")
			s := storeSave(t, repo, store, SnapshotOptions{})
			want := tc.break_(t, store, repo, s.Path)
			if _, err := CheckStored(s.Path); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("CheckStored: %v; want an error naming %s", err, want)
			}
			into := filepath.Join(base, "restored")
			_, err := RestoreStored(s.Path, into)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("RestoreStored: %v; want an error naming %s", err, want)
			}
			if ents, _ := os.ReadDir(base); len(ents) != 2 {
				t.Errorf("left behind: %v", ents)
			}
		})
	}
}

// blobOf finds the blob holding the content of the file rel of the repository's
// common dir.
func blobOf(t *testing.T, store, repo, rel string) (string, string) {
	t.Helper()
	rs := &repoStore{dir: filepath.Join(store, storeKey(repo))}
	rs.loadCache()
	e, ok := rs.cache["c/"+rel]
	if !ok {
		t.Fatalf("no stat-cache entry for %s", rel)
	}
	return rs.blobPath(e.blob), e.blob
}

// TestStoredRestoreSkipsUnsafeLinks: a symlink out of the Git dir is saved as it is,
// and the restore skips it, names it, and restores everything else.
func TestStoredRestoreSkipsUnsafeLinks(t *testing.T) {
	base := tmpDir(t)
	repo := snapRepo(t, filepath.Join(base, "repo"))
	os.Symlink("../../../../etc/passwd", filepath.Join(repo, ".git/hooks/pre-push"))
	os.Symlink("/etc", filepath.Join(repo, ".git/abs"))
	store := filepath.Join(base, "store")
	s := storeSave(t, repo, store, SnapshotOptions{})
	into := filepath.Join(base, "restored")
	res, err := RestoreStored(s.Path, into)
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(res.Skipped, "\n")
	if len(res.Skipped) != 2 || !strings.Contains(joined, ".git/hooks/pre-push") || !strings.Contains(joined, ".git/abs") {
		t.Errorf("skipped %q; want the two links", res.Skipped)
	}
	for _, p := range []string{".git/hooks/pre-push", ".git/abs"} {
		if _, err := os.Lstat(filepath.Join(into, p)); err == nil {
			t.Errorf("%s restored", p)
		}
	}
	testenv.LocalGit(t, into, "fsck", "--no-progress")
}

// TestStoredBounds: new bytes and entries are bounded, the error names the file and
// the flag, and a failed save leaves no record and none of its blobs; a sparse file
// costs what it costs on disk (it is skipped and named); a FIFO does not block.
func TestStoredBounds(t *testing.T) {
	base := tmpDir(t)
	repo := snapRepo(t, filepath.Join(base, "repo"))
	store := filepath.Join(base, "store")
	storeSave(t, repo, store, SnapshotOptions{})
	blobs := blobCount(t, store, repo)

	big := filepath.Join(repo, ".git/objects/pack/pack-huge.pack")
	randomFile(t, big, 3<<20)
	// Over the byte bound the file is left out and named; the save goes on, so a
	// session that wrote it cannot stop later launches.
	snap, err := SaveStored(SnapshotOptions{Repo: repo, Dir: store, MaxBytes: 2 << 20})
	if err != nil || snap == nil || !slices.ContainsFunc(snap.Skipped, func(l string) bool {
		return strings.HasPrefix(l, big+": ") && strings.Contains(l, "--git-save-max-size")
	}) {
		t.Errorf("3 MiB of new files with a 2 MiB bound: %v, skipped %v", err, snap)
	}
	// Only the new trees are stored (the pack directory's and the root's), not the
	// 3 MiB file.
	if n := blobCount(t, store, repo); n > blobs+2 {
		t.Errorf("a file over the bound was stored anyway: %d blobs, want at most %d", n, blobs+2)
	}
	blobs = blobCount(t, store, repo)
	// Beyond the entry bound the rest is left out and named once; the save goes on.
	snap, err = SaveStored(SnapshotOptions{Repo: repo, Dir: store, MaxEntries: 10})
	if err != nil || snap == nil || !slices.ContainsFunc(snap.Skipped, func(l string) bool {
		return strings.Contains(l, "more entries beyond the snapshot's bound of 10 entries were not saved")
	}) {
		t.Errorf("entries bound: %v, skipped %v", err, snap)
	}
	os.Remove(big)
	// It stored no file content, only the trees of the ten entries it kept.
	if n := blobCount(t, store, repo); n > blobs+10 {
		t.Errorf("the entry-bounded save left %d blobs, want at most %d", n, blobs+10)
	}
	if recs, _ := filepath.Glob(filepath.Join(store, storeKey(repo), "snaps", "*")); len(recs) != 3 {
		t.Errorf("records after two bounded saves: %v, want the first and the two bounded ones", recs)
	}

	sparse := filepath.Join(repo, ".git/objects/pack/pack-sparse.pack")
	f, _ := os.Create(sparse)
	f.Truncate(1 << 40)
	f.Close()
	fifo := filepath.Join(repo, ".git/objects/pack/pack-fifo.pack")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan *Snapshot)
	go func() {
		s, err := SaveStored(SnapshotOptions{Repo: repo, Dir: store})
		if err != nil {
			t.Error(err)
		}
		done <- s
	}()
	select {
	case s := <-done:
		if s == nil {
			return
		}
		// Both are skipped and each is named with its reason; nothing else is.
		want := map[string]string{sparse: "sparse", fifo: "FIFO"}
		if len(s.Skipped) != len(want) {
			t.Errorf("skipped %q; want exactly the sparse file and the FIFO", s.Skipped)
		}
		for path, reason := range want {
			named := false
			for _, line := range s.Skipped {
				if strings.Contains(line, path+":") && strings.Contains(line, reason) {
					named = true
				}
			}
			if !named {
				t.Errorf("skipped %q; want %s named as %s", s.Skipped, path, reason)
			}
		}
		if s.NewBytes > 1<<20 {
			t.Errorf("stored %d new bytes for a sparse file", s.NewBytes)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the save blocked (on the FIFO?)")
	}
}

// TestStoredRetention: --git-save-keep keeps the newest N records, the byte budget
// drops older records whose distinct content does not fit, and the blobs only
// dropped records used are removed while shared ones stay.
func TestStoredRetention(t *testing.T) {
	noRacy(t)
	old := collectEvery
	collectEvery = 1
	defer func() { collectEvery = old }()
	base := tmpDir(t)
	repo := snapRepo(t, filepath.Join(base, "repo"))
	store := filepath.Join(base, "store")
	extra := filepath.Join(repo, ".git/objects/pack/pack-x.pack")
	var first *Snapshot
	for i := 0; i < 5; i++ {
		randomFile(t, extra, 256<<10) // a different 256 KiB each time
		s := storeSave(t, repo, store, SnapshotOptions{Keep: 3})
		if i == 0 {
			first = s
		}
		os.Remove(extra)
	}
	recs, _ := filepath.Glob(filepath.Join(store, storeKey(repo), "snaps", "*"+RecordSuffix))
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3", len(recs))
	}
	if _, err := os.Stat(first.Path); err == nil {
		t.Error("the oldest record was kept")
	}
	// Three versions of the extra pack are referenced; the two dropped are gone.
	if grew := blocks(t, filepath.Join(store, storeKey(repo), "blobs")); grew > 3*256<<10+512<<10 {
		t.Errorf("blobs use %d bytes after pruning, want about 3 × 256 KiB", grew)
	}
	for _, r := range recs {
		if _, err := CheckStored(r); err != nil {
			t.Errorf("kept record broken by pruning: %v", err)
		}
	}

	// A byte budget below two versions keeps only the newest.
	randomFile(t, extra, 256<<10)
	s := storeSave(t, repo, store, SnapshotOptions{Keep: 3, KeepBytes: 300 << 10})
	recs, _ = filepath.Glob(filepath.Join(store, storeKey(repo), "snaps", "*"+RecordSuffix))
	if len(recs) != 1 || recs[0] != s.Path {
		t.Errorf("records %v, want only the newest under a 300 KiB budget", recs)
	}
	if _, err := CheckStored(s.Path); err != nil {
		t.Error(err)
	}
}

// TestStoredRefusesStoreInsideRepo: a store below the work tree or the gitdir is
// refused, as the ZIP's directory was.
func TestStoredRefusesStoreInsideRepo(t *testing.T) {
	base := tmpDir(t)
	repo := snapRepo(t, filepath.Join(base, "repo"))
	for _, d := range []string{filepath.Join(repo, "saves"), filepath.Join(repo, ".git", "saves")} {
		if _, err := SaveStored(SnapshotOptions{Repo: repo, Dir: d}); err == nil || !strings.Contains(err.Error(), "lies inside") {
			t.Errorf("store %s: %v", d, err)
		}
	}
}

// TestPruneStore: agentbox gc's part in the snapshot store. Blobs no record names
// (a killed save's) go, named blobs stay and every record still checks; the store of
// a removed repository goes, that of one moved away stays when keepGone says so; a
// dry run removes nothing.
func TestPruneStore(t *testing.T) {
	base := tmpDir(t)
	repo := snapRepo(t, filepath.Join(base, "repo"))
	store := filepath.Join(base, "store")
	s := storeSave(t, repo, store, SnapshotOptions{})
	orphan := filepath.Join(store, storeKey(repo), "blobs", "ab", strings.Repeat("c", 62))
	os.MkdirAll(filepath.Dir(orphan), 0o700)
	writeFile(t, orphan, "left by a killed save")
	gone := snapRepo(t, filepath.Join(base, "gone"))
	storeSave(t, gone, store, SnapshotOptions{})
	os.RemoveAll(gone)
	// Moved away (by a session of a repository around it, say): kept as keepGone
	// says, and found again when moved back.
	moved := snapRepo(t, filepath.Join(base, "moved"))
	ms := storeSave(t, moved, store, SnapshotOptions{})
	os.Rename(moved, moved+".moved")
	start := time.Now().Add(-time.Minute)
	keepGone := func(repo string, newest time.Time) bool {
		if newest.Before(start) {
			t.Errorf("%s: newest record at %v, before the test", repo, newest)
		}
		return repo == moved
	}

	got, err := PruneStore(store, keepGone, true)
	if err != nil || len(got) != 2 {
		t.Fatalf("dry run: %+v, %v", got, err)
	}
	if _, err := os.Stat(orphan); err != nil {
		t.Fatal("the dry run removed a blob")
	}
	got, err = PruneStore(store, keepGone, false)
	if err != nil || len(got) != 2 {
		t.Fatalf("prune: %+v, %v", got, err)
	}
	for _, p := range got {
		if !p.Removed || p.Err != nil {
			t.Errorf("%+v", p)
		}
	}
	if _, err := os.Stat(orphan); err == nil {
		t.Error("the unreferenced blob is still there")
	}
	if _, err := os.Stat(filepath.Join(store, storeKey(gone))); err == nil {
		t.Error("the store of the removed repository is still there")
	}
	if _, err := CheckStored(s.Path); err != nil {
		t.Errorf("a kept record is broken: %v", err)
	}
	os.Rename(moved+".moved", moved)
	if _, err := CheckStored(ms.Path); err != nil {
		t.Errorf("the moved repository's record, moved back: %v", err)
	}
	if got, _ := PruneStore(store, keepGone, false); len(got) != 0 {
		t.Errorf("a second prune found %+v", got)
	}
}

// BenchmarkSaveStoredUnchanged is one save of unchanged metadata: a walk with one
// stat per entry and a record (go test -bench SaveStored ./gitguard).
func BenchmarkSaveStoredUnchanged(b *testing.B) {
	base, _ := filepath.EvalSymlinks(b.TempDir())
	repo := snapRepo(b, filepath.Join(base, "repo"))
	store := filepath.Join(base, "store")
	old := racyWindow
	racyWindow = -time.Hour
	defer func() { racyWindow = old }()
	if _, err := SaveStored(SnapshotOptions{Repo: repo, Dir: store}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := SaveStored(SnapshotOptions{Repo: repo, Dir: store, Keep: benchKeep}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestStoredProgress: a save that stores more than 64 MiB says so on the terminal
// it is given, and clears the line when done; a small one prints nothing.
func TestStoredProgress(t *testing.T) {
	base := tmpDir(t)
	repo := snapRepo(t, filepath.Join(base, "repo"))
	store := filepath.Join(base, "store")
	var out strings.Builder
	storeSave(t, repo, store, SnapshotOptions{Progress: &out})
	if out.Len() != 0 {
		t.Errorf("a small save printed %q", out.String())
	}
	randomFile(t, filepath.Join(repo, ".git/objects/pack/pack-big.pack"), 80<<20)
	s := storeSave(t, repo, store, SnapshotOptions{Progress: &out})
	got := out.String()
	if !strings.Contains(got, "agentbox: saving the Git metadata of "+repo+": ") || !strings.Contains(got, "MiB stored") || !strings.HasSuffix(got, "\r\033[K") {
		t.Errorf("progress %q", got)
	}
	if s.NewBytes < 80<<20 {
		t.Errorf("stored %d new bytes", s.NewBytes)
	}
}

var benchKeep = 20

// TestStoredLazyCollection: with the default collectEvery, records beyond
// --git-save-keep stop being snapshots at once, and their blobs go at the
// collectEvery-th.
func TestStoredLazyCollection(t *testing.T) {
	noRacy(t)
	base := tmpDir(t)
	repo := snapRepo(t, filepath.Join(base, "repo"))
	store := filepath.Join(base, "store")
	extra := filepath.Join(repo, ".git/objects/pack/pack-x.pack")
	blobs := func() int64 { return blocks(t, filepath.Join(store, storeKey(repo), "blobs")) }
	var peak int64
	for i := 0; i < 2+collectEvery; i++ {
		randomFile(t, extra, 256<<10)
		storeSave(t, repo, store, SnapshotOptions{Keep: 2})
		if recs, _ := filepath.Glob(filepath.Join(store, storeKey(repo), "snaps", "*"+RecordSuffix)); len(recs) != min(i+1, 2) {
			t.Fatalf("save %d: %d records, want %d", i, len(recs), min(i+1, 2))
		}
		peak = max(peak, blobs())
	}
	// At the end: at most four packs (two kept, up to two dropped since the last
	// collection) and a few 4 KiB blocks of trees and fan-out directories, whose
	// number depends on the random packs' hashes: well below a fifth pack.
	if peak < int64(collectEvery)*256<<10 || blobs() > 4*256<<10+64<<10 {
		t.Errorf("blobs peaked at %d and are %d: want the dropped ones collected together", peak, blobs())
	}
}

// TestStoredUnchangedListingWhole: a listing is used only when read whole — one
// that would pass the read bound is not kept (read up to the bound, it would vouch
// for every entry past it unchecked), and one cut short or with another count on
// its end line is not trusted.
func TestStoredUnchangedListingWhole(t *testing.T) {
	noRacy(t)
	base := tmpDir(t)
	repo := snapRepo(t, filepath.Join(base, "repo"))
	store := filepath.Join(base, "store")
	listing := filepath.Join(store, storeKey(repo), unchangedFile)
	first := storeSave(t, repo, store, SnapshotOptions{})
	whole, err := os.ReadFile(listing)
	if err != nil {
		t.Fatalf("no listing kept: %v", err)
	}
	lines := strings.SplitAfter(string(whole), "\n")
	for _, c := range []struct{ name, text string }{
		{"cut before its end line", strings.Join(lines[:len(lines)-2], "")},
		{"cut after an entry, end line kept", strings.Join(append(append([]string(nil), lines[:len(lines)-3]...), lines[len(lines)-2]), "")},
		{"a count that is not the entries'", strings.Join(lines[:len(lines)-2], "") + "end 1\n"},
		{"lines after its end", string(whole) + "e 0 0 0 0 \"/\"\n"},
	} {
		if err := os.WriteFile(listing, []byte(c.text), 0o600); err != nil {
			t.Fatal(err)
		}
		if s := storeSave(t, repo, store, SnapshotOptions{}); s.Unchanged {
			t.Errorf("%s: trusted", c.name)
		}
	}
	if s := storeSave(t, repo, store, SnapshotOptions{}); !s.Unchanged {
		t.Errorf("the listing the last save wrote is not used (first record %s, this one %s)", first.Path, s.Path)
	}

	old := maxListing
	maxListing = int64(len(whole)) - 1
	defer func() { maxListing = old }()
	writeFile(t, filepath.Join(repo, ".git", "description"), "changed\n")
	storeSave(t, repo, store, SnapshotOptions{})
	if _, err := os.Stat(listing); err == nil {
		t.Error("a listing beyond the read bound was kept")
	}
	maxListing = old
	storeSave(t, repo, store, SnapshotOptions{}) // keeps a listing again
	b, err := os.ReadFile(listing)
	if err != nil {
		t.Fatal(err)
	}
	maxListing = int64(len(b)) - 1
	if s := storeSave(t, repo, store, SnapshotOptions{}); s.Unchanged {
		t.Error("a listing larger than the read bound was used")
	}
}

func TestStoredNotAWorkTree(t *testing.T) {
	base := tmpDir(t)
	plain := filepath.Join(base, "plain")
	os.Mkdir(plain, 0o755)
	dangling := filepath.Join(base, "dangling")
	os.Mkdir(dangling, 0o755)
	writeFile(t, dangling+"/.git", "gitdir: /nonexistent/x\n")
	store := filepath.Join(base, "store")
	for _, repo := range []string{plain, dangling} {
		s, err := SaveStored(SnapshotOptions{Repo: repo, Dir: store})
		if s != nil || err != nil {
			t.Errorf("%s: snapshot %v, %v; want none", repo, s, err)
		}
	}
	if ents, _ := os.ReadDir(base); len(ents) != 2 {
		t.Errorf("files appeared in %s: %v", base, ents)
	}
}

// TestStoredDiskFull fills a small tmpfs: the save fails naming the store, leaves no
// record, and changes nothing in the repository.
func TestStoredDiskFull(t *testing.T) {
	base := tmpDir(t)
	repo := snapRepo(t, filepath.Join(base, "proj"))
	randomFile(t, repo+"/big.bin", 2<<20)
	testenv.LocalGit(t, repo, "add", "big.bin")
	testenv.LocalGit(t, repo, "commit", "-q", "-m", "big")
	before := diskTree(t, repo+"/.git")

	full := filepath.Join(base, "full")
	os.Mkdir(full, 0o755)
	mountTmpfs(t, full, 0, "size=256k")

	_, err := SaveStored(SnapshotOptions{Repo: repo, Dir: full})
	if err == nil {
		t.Fatal("snapshot to a full filesystem succeeded")
	}
	if !errors.Is(err, unix.ENOSPC) || !strings.Contains(err.Error(), full) {
		t.Errorf("error %q: want ENOSPC naming %s", err, full)
	}
	if recs, _ := filepath.Glob(filepath.Join(full, "*", "*", "*"+RecordSuffix)); len(recs) != 0 {
		t.Errorf("records left behind: %v", recs)
	}
	compareTrees(t, "repository after the failed snapshot", before, diskTree(t, repo+"/.git"))
}

// TestStoredDirNotWritable: a read-only filesystem as root, a mode-0555 directory
// otherwise.
func TestStoredDirNotWritable(t *testing.T) {
	base := tmpDir(t)
	repo := snapRepo(t, filepath.Join(base, "proj"))
	ro := filepath.Join(base, "ro")
	os.Mkdir(ro, 0o755)
	if os.Geteuid() == 0 {
		mountTmpfs(t, ro, unix.MS_RDONLY, "")
	} else {
		os.Chmod(ro, 0o555)
		t.Cleanup(func() { os.Chmod(ro, 0o755) })
	}
	_, err := SaveStored(SnapshotOptions{Repo: repo, Dir: ro})
	if err == nil || !strings.Contains(err.Error(), ro) {
		t.Fatalf("error %v: want a failure naming %s", err, ro)
	}
}

// TestStoredUnreadableObject: a file of .git the user cannot read stops the save.
func TestStoredUnreadableObject(t *testing.T) {
	if !testenv.AsTestUser(t) { // root would read what the test makes unreadable
		return
	}
	base := tmpDir(t)
	repo := snapRepo(t, filepath.Join(base, "proj"))
	obj, _ := filepath.Glob(repo + "/.git/objects/??/*")
	os.Chmod(obj[0], 0)
	_, err := SaveStored(SnapshotOptions{Repo: repo, Dir: filepath.Join(base, "store")})
	if err == nil || !strings.Contains(err.Error(), obj[0]) || !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("error %v: want permission denied naming %s", err, obj[0])
	}
}

// TestStoredOddRepoName: a repository whose name holds a space, a newline and
// regular-expression characters is saved, pruned and restored like any other.
func TestStoredOddRepoName(t *testing.T) {
	base := tmpDir(t)
	repo := snapRepo(t, filepath.Join(base, "a b\nc.*"))
	store := filepath.Join(base, "store")
	var saved []*Snapshot
	for i := range 3 {
		writeFile(t, repo+"/.git/description", fmt.Sprintf("change %d\n", i))
		saved = append(saved, storeSave(t, repo, store, SnapshotOptions{Keep: 2, Now: time.Date(2026, 1, 1, 0, 0, i, 0, time.Local)}))
	}
	if _, err := os.Stat(saved[0].Path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("oldest record %s: %v, want pruned", saved[0].Path, err)
	}
	res, err := RestoreStored(saved[2].Path, filepath.Join(base, "out"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Manifest.Repo != repo {
		t.Errorf("manifest repo %q, want %q", res.Manifest.Repo, repo)
	}
}

// TestStoredPlantedSpecialFiles: what an earlier session could leave in .git — a
// FIFO where a ref should be, packed-refs linked to /dev/zero — neither blocks nor
// floods the save; the FIFO is left out and named, the link stored as a link.
func TestStoredPlantedSpecialFiles(t *testing.T) {
	base := tmpDir(t)
	repo := snapRepo(t, filepath.Join(base, "proj"))
	ref := repo + "/.git/refs/heads/main"
	os.Remove(ref)
	if err := unix.Mkfifo(ref, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(repo + "/.git/packed-refs")
	if err := os.Symlink("/dev/zero", repo+"/.git/packed-refs"); err != nil {
		t.Fatal(err)
	}
	s := storeSave(t, repo, filepath.Join(base, "store"), SnapshotOptions{})
	if s.Manifest.HeadCommit != "" || s.Manifest.Head != "ref: refs/heads/main" {
		t.Errorf("head %q, head_commit %q; want the symref and no commit", s.Manifest.Head, s.Manifest.HeadCommit)
	}
	if len(s.Skipped) != 1 || !strings.Contains(s.Skipped[0], ref) || !strings.Contains(s.Skipped[0], "FIFO") {
		t.Errorf("skipped %q, want the FIFO at %s named", s.Skipped, ref)
	}
}
