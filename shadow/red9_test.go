package shadow

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"golang.org/x/sys/unix"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// Red-team tests of the head start (prestage.go) and of the kept index layout
// (layout.go). Each attack changes the working tree between the head start's
// listing (or a batch) and the sweep, through preStage's progress callback, which
// runs between batches: what a second session's agent writing the same tree could
// do at that moment.

// red9Sweep runs stage()'s head start and sweep by hand, calling between after
// each batch, and returns the index's tree and the sweep's notes.
func red9Sweep(t *testing.T, s *Store, between func(done int)) (string, []string) {
	t.Helper()
	defer func(b int) { preStageBatch = b }(preStageBatch)
	preStageBatch = 1000
	wt := s.git
	wt.workTree = s.Repo
	s.preStage(wt, nil, func(done, _ int) {
		if between != nil {
			between(done)
		}
	})
	notes, err := s.add(wt, nil, nil)
	if err != nil {
		t.Fatalf("sweep: %v", err)
	}
	tree, err := s.git.out("write-tree")
	if err != nil {
		t.Fatalf("write-tree: %v", err)
	}
	return tree, notes
}

// red9Clean: no lock and no unfinished pack left, and the store is whole.
func red9Clean(t *testing.T, s *Store) {
	t.Helper()
	if tmp, _ := filepath.Glob(filepath.Join(s.Dir, "objects", "pack", "tmp_*")); len(tmp) != 0 {
		t.Errorf("unfinished pack files left: %v", tmp)
	}
	if _, err := os.Lstat(filepath.Join(s.Dir, "index.lock")); err == nil {
		t.Error("index.lock left")
	}
	shadowGit(t, s, "fsck", "--no-progress", "--no-dangling")
	shadowGit(t, s, "ls-files", "-s") // the index reads (its checksum is right)
}

// red9TreeByGit is treeByGit with --ignore-errors (as the recorder's sweep): names
// Git refuses are left out, not fatal.
func red9TreeByGit(t *testing.T, repo string) string {
	t.Helper()
	idx := filepath.Join(t.TempDir(), "index")
	env := []string{"HOME=" + t.TempDir(), "PATH=/usr/local/bin:/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1", "GIT_INDEX_FILE=" + idx}
	cmd := exec.Command("git", "add", "--all", "--ignore-errors")
	cmd.Dir, cmd.Env = repo, env
	cmd.Run() // exit 1: something left out
	cmd = exec.Command("git", "write-tree")
	cmd.Dir, cmd.Env = repo, env
	out, err := cmd.Output()
	must(t, err)
	return strings.TrimSpace(string(out))
}

// red9Compare compares the recorded tree got (in the store) with git add --all's
// want (in the repository's own object store), by their listings.
func red9Compare(t *testing.T, s *Store, got, want string) {
	t.Helper()
	red9CompareRaced(t, s, got, want, "\x00")
}

// red9CompareRaced is red9Compare allowing extra recorded entries below raced (a
// change made while the record ran, which git add --all's own window between its
// scan and its hashing has as well): they are logged, anything else is an error.
func red9CompareRaced(t *testing.T, s *Store, got, want, raced string) {
	t.Helper()
	if got == want {
		return
	}
	g := strings.Split(shadowGit(t, s, "ls-tree", "-r", got), "\n")
	w := strings.Split(hostGit(t, t.TempDir(), s.Repo, "ls-tree", "-r", want), "\n")
	in := map[string]bool{}
	for _, l := range w {
		in[l] = true
	}
	var diff []string
	racedN := 0
	for _, l := range g {
		if !in[l] {
			if _, p, _ := strings.Cut(l, "\t"); strings.HasPrefix(p, raced) {
				racedN++
				continue
			}
			diff = append(diff, "+ "+l)
		}
		delete(in, l)
	}
	for l := range in {
		if _, p, _ := strings.Cut(l, "\t"); strings.HasPrefix(p, raced) {
			racedN++
			continue
		}
		diff = append(diff, "- "+l)
	}
	if racedN > 0 {
		t.Logf("raced: %d entries at %q differ from git add --all of the tree now", racedN, raced)
	}
	if len(diff) == 0 {
		return
	}
	if len(diff) > 20 {
		diff = append(diff[:20], fmt.Sprintf("… %d more", len(diff)-20))
	}
	t.Errorf("recorded tree %s, git add --all's %s (+ recorded only, - git's only):\n%s", got, want, strings.Join(diff, "\n"))
}

func red9Fifo(t *testing.T, p string) {
	t.Helper()
	must(t, os.RemoveAll(p))
	must(t, syscall.Mkfifo(p, 0o644))
}

// A FIFO swapped in for a file a later batch will stage: the batch fails (or is
// stopped by the bound), the head start ends, and the sweep records what Git would.
func TestRed9PrestageFifoInLaterBatch(t *testing.T) {
	repo := newRepo(t, map[string]string{"tracked.txt": "t\n"})
	manyFiles(t, repo, "src", 2500)
	s, _ := openStore(t, repo)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tree, _ := red9Sweep(t, s, func(n int) {
			if n == 1000 {
				red9Fifo(t, filepath.Join(repo, "src", "d015", "f000.txt"))
			}
		})
		red9Compare(t, s, tree, red9TreeByGit(t, repo))
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the record hangs on a FIFO")
	}
	if s.preStaged != 1 {
		t.Errorf("%d batches staged, want 1", s.preStaged)
	}
	red9Clean(t, s)
}

// A file the first batch staged, made a FIFO before the sweep: Git's add keeps a
// tracked entry it cannot read (--ignore-errors), so the record would hold the
// file's old content where git add --all of the tree holds nothing.
func TestRed9PrestageFifoOverStagedFile(t *testing.T) {
	repo := newRepo(t, map[string]string{"tracked.txt": "t\n"})
	manyFiles(t, repo, "src", 2500)
	s, _ := openStore(t, repo)
	tree, notes := red9Sweep(t, s, func(n int) {
		if n == 1000 {
			red9Fifo(t, filepath.Join(repo, "src", "d000", "f000.txt"))
		}
	})
	red9CompareRaced(t, s, tree, red9TreeByGit(t, repo), "src/d000/f000.txt")
	t.Logf("notes: %q", notes)
	red9Clean(t, s)
}

// A .gitignore written after the listing, ignoring files a later batch stages:
// the batch stages them anyway (update-index reads no .gitignore), and the
// sweep, finding them tracked, keeps them.
func TestRed9PrestageIgnoredAfterListing(t *testing.T) {
	repo := newRepo(t, map[string]string{"tracked.txt": "t\n"})
	manyFiles(t, repo, "src", 2500)
	s, _ := openStore(t, repo)
	tree, _ := red9Sweep(t, s, func(n int) {
		if n == 1000 {
			write(t, filepath.Join(repo, "src", ".gitignore"), "d02*/\n")
		}
	})
	red9CompareRaced(t, s, tree, red9TreeByGit(t, repo), "src/d02")
	red9Clean(t, s)
}

// A directory a later batch stages, made a nested repository after the listing:
// the batch stages its files, and the sweep keeps them (a directory the index
// has entries below is not looked at as a repository).
func TestRed9PrestageNestedRepoAfterListing(t *testing.T) {
	repo := newRepo(t, map[string]string{"tracked.txt": "t\n"})
	manyFiles(t, repo, "src", 2500)
	s, _ := openStore(t, repo)
	home := t.TempDir()
	tree, _ := red9Sweep(t, s, func(n int) {
		if n == 1000 {
			d := filepath.Join(repo, "src", "d020")
			hostGit(t, home, d, "init", "-q")
			hostGit(t, home, d, "add", "-A")
			hostGit(t, home, d, "commit", "-q", "-m", "n")
		}
	})
	red9CompareRaced(t, s, tree, red9TreeByGit(t, repo), "src/d020")
	red9Clean(t, s)
}

// A directory of a later batch swapped for a symlink to a directory outside the
// tree with the same names: update-index refuses a path beyond a symlink, and
// nothing from outside is recorded.
func TestRed9PrestageSymlinkedParent(t *testing.T) {
	repo := newRepo(t, map[string]string{"tracked.txt": "t\n"})
	manyFiles(t, repo, "src", 2500)
	outside := t.TempDir()
	for i := range 100 {
		write(t, filepath.Join(outside, fmt.Sprintf("f%03d.txt", i)), "SECRET\n")
	}
	s, _ := openStore(t, repo)
	tree, _ := red9Sweep(t, s, func(n int) {
		if n == 1000 {
			d := filepath.Join(repo, "src", "d020")
			must(t, os.RemoveAll(d))
			must(t, os.Symlink(outside, d))
		}
	})
	red9Compare(t, s, tree, red9TreeByGit(t, repo))
	secret := hostGit(t, t.TempDir(), repo, "hash-object", filepath.Join(outside, "f000.txt"))
	if strings.Contains(shadowGit(t, s, "ls-files", "-s"), secret) {
		t.Error("outside content recorded")
	}
	red9Clean(t, s)
}

// A file of a later batch made a sparse file above maxRecordFile: the bound stops
// the batch, the sweep leaves the file out and names it, nothing is left behind.
func TestRed9PrestageHugeSparseFile(t *testing.T) {
	repo := newRepo(t, map[string]string{"tracked.txt": "t\n"})
	manyFiles(t, repo, "src", 2500)
	s, _ := openStore(t, repo)
	huge := filepath.Join(repo, "src", "d015", "f000.txt")
	tree, notes := red9Sweep(t, s, func(n int) {
		if n == 1000 {
			must(t, os.Truncate(huge, maxRecordFile+1<<20))
		}
	})
	if !strings.Contains(strings.Join(notes, "\n"), "d015/f000.txt") {
		t.Errorf("notes do not name the huge file: %q", notes)
	}
	must(t, os.Remove(huge))
	want := red9TreeByGit(t, repo)
	red9Compare(t, s, tree, want)
	red9Clean(t, s)
}

// A session that turns a tracked file into a directory and makes more than
// maxChangedPaths files: the batch holding a/x fails (a file and a directory at
// once, no --replace) and the sweep does the rest.
func TestRed9PrestageFileBecomesDirectory(t *testing.T) {
	repo := newRepo(t, map[string]string{"a": "a\n", "tracked.txt": "t\n"})
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, nil)
	id := record(t, s, Record{Start: time.Now()}, func() {
		must(t, os.Remove(filepath.Join(repo, "a")))
		write(t, filepath.Join(repo, "a", "x"), "x\n")
		manyFiles(t, repo, "vendor", 2100)
	})
	red9Compare(t, s, shadowGit(t, s, "rev-parse", "refs/sessions/"+id+"^{tree}"), red9TreeByGit(t, repo))
	red9Clean(t, s)
}

// Names Git refuses or reads specially, among many new files: ".GIT" components,
// NTFS-style ".git." names, a name with a newline, a "-" name, a nested
// repository's gitfile pointing nowhere.
func TestRed9PrestageOddNames(t *testing.T) {
	repo := newRepo(t, map[string]string{"tracked.txt": "t\n"})
	manyFiles(t, repo, "src", 2100)
	for _, n := range []string{"x/.GIT/config", "y/.git./h", "z/.git~1/h", "nl\nname", "--stdin", "sub/.git"} {
		write(t, filepath.Join(repo, n), "gitdir: /nonexistent\n")
	}
	write(t, filepath.Join(repo, "sub", "f"), "f\n")
	s, _ := openStore(t, repo)
	tree, notes := red9Sweep(t, s, nil)
	t.Logf("notes: %q", notes)
	red9Compare(t, s, tree, red9TreeByGit(t, repo))
	red9Clean(t, s)
}

// --- the kept layout ---

// red9Layout returns the store's index bytes and its true layout.
func red9Layout(t *testing.T, s *Store) ([]byte, indexLayout) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.Dir, "index"))
	must(t, err)
	l, err := layoutOf(b)
	must(t, err)
	return b, l
}

// A layout file naming the index's checksum but with wrong offsets (what a bug or
// a torn write could leave): stageInPlace must refuse or stage right — never
// patch other bytes. Every shape readLayout accepts is tried: each offset moved by
// one alignment step where the order allows.
func TestRed9LayoutWrongOffsets(t *testing.T) {
	files := map[string]string{}
	for i := range 40 {
		files[fmt.Sprintf("d%d/%s.txt", i%4, strings.Repeat("n", i%9+1))] = fmt.Sprintf("%d\n", i)
	}
	files["a"] = "a\n"
	repo := newRepo(t, files)
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, nil)
	orig, l := red9Layout(t, s)
	indexPath := filepath.Join(s.Dir, "index")
	target := "d1/nnnnnnnnn.txt"
	write(t, filepath.Join(repo, target), "edited\n")
	accepted, staged := 0, 0
	defer func() { t.Logf("%d wrong layouts read as the index's, %d of them staged with", accepted, staged) }()
	for k := 0; k <= len(l.offsets); k++ {
		for _, d := range []int{-8, 8, 16} {
			bad := indexLayout{ext: l.ext, offsets: append([]uint32(nil), l.offsets...)}
			if k == len(l.offsets) {
				bad.ext += d // where the extensions start
			} else {
				bad.offsets[k] = uint32(int(bad.offsets[k]) + d)
			}
			must(t, os.WriteFile(indexPath, orig, 0o644))
			s.writeLayout(red9Key(t, s), bad)
			_, release, ok := s.readLayout(orig, red9Key(t, s))
			if !ok {
				continue // refused before use
			}
			release()
			accepted++
			tree, _, err := s.stageInPlace([]string{target})
			now, rerr := os.ReadFile(indexPath)
			must(t, rerr)
			if err != nil {
				if !bytes.Equal(now, orig) {
					t.Errorf("offset %d%+d: refused, but the index changed", k, d)
				}
				continue
			}
			staged++
			if want := red9TreeOfEntries(t, s); tree != want {
				t.Errorf("offset %d%+d: staged tree %s, the entries' tree %s", k, d, tree, want)
			}
			// Staged: the index must differ from the original only in the
			// target's entry (and the cache tree and checksum).
			_, nl := red9Layout(t, s)
			for i, o := range l.offsets {
				if nl.offsets[i] != o {
					t.Fatalf("offset %d%+d: the entries moved", k, d)
				}
				off, end := int(o), nl.ext
				if i+1 < len(l.offsets) {
					end = int(l.offsets[i+1])
				}
				name := string(orig[off+62 : off+62+int(binary.BigEndian.Uint16(orig[off+60:])&0xfff)])
				if name != target && !bytes.Equal(now[off:end], orig[off:end]) {
					t.Errorf("offset %d%+d: entry %q was patched", k, d, name)
				}
			}
		}
	}
}

// An index whose bytes changed under an unchanged trailing checksum (a damaged
// file) with a layout naming that checksum: the staging in place no longer checks
// the SHA-1, so it writes the damage on under a good checksum, where Git would
// refuse the index. Documented; not a path the sandbox can reach (the store is
// the host's).
func TestRed9LayoutDamagedIndexCarriedOn(t *testing.T) {
	repo := newRepo(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n", "c.txt": "c\n"})
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, nil)
	orig, l := red9Layout(t, s)
	s.writeLayout(red9Key(t, s), l)
	damaged := bytes.Clone(orig)
	damaged[l.offsets[0]+40] ^= 0xff // a.txt's blob id, under the same checksum
	indexPath := filepath.Join(s.Dir, "index")
	must(t, os.WriteFile(indexPath, damaged, 0o644))
	write(t, filepath.Join(repo, "c.txt"), "c2\n")
	if _, _, err := s.stageInPlace([]string{"c.txt"}); err == nil {
		t.Error("a damaged index was staged in place (its damage given a good checksum)")
	}
	if now, _ := os.ReadFile(indexPath); !bytes.Equal(now, damaged) {
		t.Error("the refused staging changed the index")
	}
}

// red9Key is the key of the shadow index as it is now.
func red9Key(t *testing.T, s *Store) []byte {
	t.Helper()
	p := filepath.Join(s.Dir, "index")
	b, err := os.ReadFile(p)
	must(t, err)
	var st unix.Stat_t
	must(t, unix.Lstat(p, &st))
	return indexKey(b, &st)
}

// Rounds of in-place edits, smudges (same-second edits), Git stagings (new
// files) and removals, each record compared with git add --all's tree and the
// index read by Git: the kept layout, relabelled in place, must stay the index's.
func TestRed9LayoutRounds(t *testing.T) {
	files := map[string]string{}
	for i := range 60 {
		files[fmt.Sprintf("d%d/e%d/f%02d.txt", i%3, i%5, i)] = fmt.Sprintf("%d\n", i)
	}
	repo := newRepo(t, files)
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, nil)
	for round := range 12 {
		id := record(t, s, Record{Start: time.Now()}, func() {
			for j := range 3 {
				i := (round*7 + j*11) % 60
				write(t, filepath.Join(repo, fmt.Sprintf("d%d/e%d/f%02d.txt", i%3, i%5, i)), fmt.Sprintf("round %d %d\n", round, j))
			}
			switch round % 4 {
			case 1:
				write(t, filepath.Join(repo, fmt.Sprintf("new%d.txt", round)), "n\n")
			case 3:
				i := (round * 13) % 60
				os.Remove(filepath.Join(repo, fmt.Sprintf("d%d/e%d/f%02d.txt", i%3, i%5, i)))
			}
		})
		red9Compare(t, s, shadowGit(t, s, "rev-parse", "refs/sessions/"+id+"^{tree}"), red9TreeByGit(t, repo))
		b, l := red9Layout(t, s)
		if kept, release, ok := s.readLayout(b, red9Key(t, s)); ok {
			differs := kept.ext != l.ext || fmt.Sprint(kept.offsets) != fmt.Sprint(l.offsets)
			release()
			if differs {
				t.Fatalf("round %d: the kept layout names the index but is not its layout", round)
			}
		}
	}
	if s.inPlace == 0 {
		t.Error("no staging in place ran")
	}
	red9Clean(t, s)
}

// A sweep stopped by the bound (a sparse file above maxRecordFile) with no head
// start: the killed `git add` leaves its unfinished bulk check-in pack
// (objects/pack/tmp_pack_*: every blob the sweep had written so far) behind, on
// every record that meets the file again.
func TestRed9BoundedSweepLeavesNoPack(t *testing.T) {
	repo := newRepo(t, map[string]string{"tracked.txt": "t\n"})
	manyFiles(t, repo, "src", 300)
	huge := filepath.Join(repo, "src", "d002", "huge")
	write(t, huge, "")
	must(t, os.Truncate(huge, maxRecordFile+1<<20))
	s, _ := openStore(t, repo)
	id := record(t, s, Record{Start: time.Now()}, nil)
	if s.preStaged != 0 {
		t.Fatalf("%d batches: want the sweep alone", s.preStaged)
	}
	if !strings.Contains(strings.Join(onlySession(t, s).Notes, "\n"), "src/d002/huge") {
		t.Errorf("notes do not name the huge file")
	}
	if files := shadowGit(t, s, "ls-tree", "-r", "--name-only", "refs/sessions/"+id); strings.Count(files, "\n")+1 != 301 {
		t.Errorf("want 301 files recorded")
	}
	red9Clean(t, s)
}

// The head start's listing above preStageMaxList is not read into memory: the
// launcher stops reading at the bound (a tree of a million files with 4 KiB paths
// would list 4 GB into the launcher before the check, where Git itself keeps
// going). The listing here is ~2.4 MB against a 64 KiB bound; what preStage
// allocates is measured.
func TestRed9PrestageListingBounded(t *testing.T) {
	defer func(m int) { preStageMaxList = m }(preStageMaxList)
	preStageMaxList = 64 << 10
	repo := newRepo(t, map[string]string{"tracked.txt": "t\n"})
	long := filepath.Join(repo, strings.Repeat("d", 200), strings.Repeat("e", 200), strings.Repeat("f", 200), strings.Repeat("g", 200))
	write(t, filepath.Join(long, "x"), "x\n")
	for i := range 2100 {
		must(t, os.Link(filepath.Join(long, "x"), filepath.Join(long, fmt.Sprintf("%0200d", i))))
	}
	s, _ := openStore(t, repo)
	wt := s.git
	wt.workTree = s.Repo
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	staged := s.preStage(wt, nil, nil)
	runtime.ReadMemStats(&after)
	if staged {
		t.Error("a listing above the bound was staged")
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 1<<20 {
		t.Errorf("preStage allocated %d bytes for a listing bounded at %d", d, preStageMaxList)
	}
}

// A FIFO named .gitignore (read by ls-files and the sweep) and one named
// .gitattributes (read by update-index for each file it hashes) among many new
// files: the bound stops the listing or the batch, the sweep leaves each directory
// out and names it; nothing hangs or is left behind.
func TestRed9PrestageFifoIgnoreAndAttributes(t *testing.T) {
	for _, name := range []string{".gitignore", ".gitattributes"} {
		t.Run(name, func(t *testing.T) {
			repo := newRepo(t, map[string]string{"tracked.txt": "t\n"})
			manyFiles(t, repo, "src", 2100)
			must(t, syscall.Mkfifo(filepath.Join(repo, "src", "d010", name), 0o644))
			s, _ := openStore(t, repo)
			done := make(chan string, 1)
			go func() {
				done <- record(t, s, Record{Start: time.Now()}, nil)
			}()
			var id string
			select {
			case id = <-done:
			case <-time.After(2 * time.Minute):
				t.Fatal("the record hangs")
			}
			if notes := strings.Join(onlySession(t, s).Notes, "\n"); !strings.Contains(notes, "src/d010") {
				t.Errorf("notes do not name src/d010:\n%s", notes)
			}
			must(t, os.RemoveAll(filepath.Join(repo, "src", "d010")))
			red9Compare(t, s, shadowGit(t, s, "rev-parse", "refs/sessions/"+id+"^{tree}"), red9TreeByGit(t, repo))
			red9Clean(t, s)
		})
	}
}

// Staging in place through the layout's binary search where index order is
// subtle: names around '/' ("a-b", "a.b", "a/b", "a0"), bytes above 0x7f, and a
// path near the 12-bit name length of an entry's flags (0xfff; longer ones
// no lstat reaches).
func TestRed9InPlaceOrderAndLongNames(t *testing.T) {
	long := strings.Repeat("L", 250) + "/" + strings.Repeat("M", 250)
	for len(long) < 3700 {
		long += "/" + strings.Repeat("N", 250)
	}
	long += "/file.txt"
	files := map[string]string{
		"a-b": "1\n", "a.b": "2\n", "a/b": "3\n", "a/c/d": "4\n", "a0": "5\n", "a/b-c": "6\n", "a/b/x": "",
		"\xc3\xa9t\xc3\xa9/f": "7\n", "\xffz": "8\n", "z/\x01": "9\n", long: "10\n",
	}
	delete(files, "a/b/x") // a/b is a file
	repo := newRepo(t, files)
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, nil)
	for round, set := range [][]string{{"a/b", "a0"}, {"a-b", "a/c/d"}, {"\xc3\xa9t\xc3\xa9/f", "\xffz", "z/\x01"}, {long}, {"a.b", long, "a/b-c"}} {
		inPlace := s.inPlace
		id := record(t, s, Record{Start: time.Now()}, func() {
			for _, p := range set {
				write(t, filepath.Join(repo, p), fmt.Sprintf("round %d %q\n", round, p))
			}
		})
		red9Compare(t, s, shadowGit(t, s, "rev-parse", "refs/sessions/"+id+"^{tree}"), red9TreeByGit(t, repo))
		t.Logf("round %d: staged in place: %v", round, s.inPlace > inPlace)
	}
	red9Clean(t, s)
}

// Batches that each stay under gitTimeout (files slow to hash: here the head
// start's clock advances by a third of it with each batch) must not add up to many
// times it: the whole record, which holds the store's lock that other sessions wait
// lockTimeout for, ran preStageMaxPacks times gitTimeout where one `git add` was
// stopped at one. The head start stops starting batches once it has used
// gitTimeout: of five batches, exactly three start; the sweep does the rest.
// The clock is the test's, not the machine's: a loaded machine's slow Git changes
// nothing here, and Git keeps its real bound.
func TestRed9PrestageTotalTimeBounded(t *testing.T) {
	repo := newRepo(t, map[string]string{"tracked.txt": "t\n"})
	manyFiles(t, repo, "src", 5000)
	s, _ := openStore(t, repo)
	defer func(now func() time.Time) { preStageNow = now }(preStageNow)
	var used time.Duration
	start := time.Now()
	preStageNow = func() time.Time { return start.Add(used) }
	tree, _ := red9Sweep(t, s, func(int) { used += gitTimeout / 3 })
	if s.preStaged != 3 {
		t.Errorf("%d batches ran, want 3: those that started before the head start had used gitTimeout", s.preStaged)
	}
	red9Compare(t, s, tree, red9TreeByGit(t, repo))
	red9Clean(t, s)
}

// red9TreeOfEntries is the tree of the store index's entries, built by Git from
// them alone (a fresh index, no cache tree).
func red9TreeOfEntries(t *testing.T, s *Store) string {
	t.Helper()
	ls := shadowGit(t, s, "ls-files", "-s", "-z")
	tmp := filepath.Join(t.TempDir(), "index")
	env := []string{"GIT_DIR=" + s.Dir, "GIT_INDEX_FILE=" + tmp, "HOME=" + t.TempDir(), "GIT_CONFIG_NOSYSTEM=1", "PATH=/usr/local/bin:/usr/bin:/bin"}
	cmd := exec.Command("git", "update-index", "-z", "--index-info")
	cmd.Env, cmd.Stdin = env, strings.NewReader(ls)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("update-index: %v\n%s", err, out)
	}
	cmd = exec.Command("git", "write-tree")
	cmd.Env = env
	out, err := cmd.Output()
	must(t, err)
	return strings.TrimSpace(string(out))
}

// A session past maxChangedPaths through files below new directories (the new
// count), with edits in place, a removal, a new nested repository, ignored files
// and an executable bit in the same session: the sweep that manyChanged
// sends it to records every change.
func TestRed9ManyChangedSkipsNothing(t *testing.T) {
	defer func(b int) { preStageBatch = b }(preStageBatch)
	preStageBatch = 1000
	repo := newRepo(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n", "old/c.txt": "c\n", ".gitignore": "*.log\n", "run.sh": "#!/bin/sh\n"})
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, nil)
	home := t.TempDir()
	id := record(t, s, Record{Start: time.Now()}, func() {
		write(t, filepath.Join(repo, "a.txt"), "a2\n")
		must(t, os.Remove(filepath.Join(repo, "b.txt")))
		manyFiles(t, repo, "new1", 1500)
		manyFiles(t, repo, "new2", 600)
		write(t, filepath.Join(repo, "new2", "x.log"), "ignored\n")
		write(t, filepath.Join(repo, "new1", "keep.log"), "ignored too\n")
		must(t, os.Chmod(filepath.Join(repo, "run.sh"), 0o755))
		hostGit(t, home, repo, "init", "-q", "old/nested")
		write(t, filepath.Join(repo, "old", "nested", "n"), "n\n")
		hostGit(t, home, filepath.Join(repo, "old", "nested"), "add", "n")
		hostGit(t, home, filepath.Join(repo, "old", "nested"), "commit", "-q", "-m", "n")
	})
	if !s.manyChanged || s.preStaged == 0 {
		t.Errorf("manyChanged %v, %d batches: want the sweep with its head start", s.manyChanged, s.preStaged)
	}
	red9Compare(t, s, shadowGit(t, s, "rev-parse", "refs/sessions/"+id+"^{tree}"), red9TreeByGit(t, repo))
	// And the next session, which changes one file, stages just it.
	id = record(t, s, Record{Start: time.Now()}, func() { write(t, filepath.Join(repo, "new2", "d005", "f000.txt"), "z\n") })
	red9Compare(t, s, shadowGit(t, s, "rev-parse", "refs/sessions/"+id+"^{tree}"), red9TreeByGit(t, repo))
	red9Clean(t, s)
}

// Two sessions on one repository at once, each opening the store as its process
// would, each making more than maxChangedPaths files while the other records (the
// first record and the end of each run with the head start, under the store's
// lock): both are recorded, the last record is the tree's, the store is whole.
func TestRed9ConcurrentHeadStarts(t *testing.T) {
	defer func(b int) { preStageBatch = b }(preStageBatch)
	preStageBatch = 1000
	repo := newRepo(t, map[string]string{"a": "a\n"})
	manyFiles(t, repo, "base", 2100)
	state := filepath.Join(t.TempDir(), "state")
	errs := make(chan error, 2)
	stores := make([]*Store, 2)
	for i := range 2 {
		s, err := Open(state, repo)
		must(t, err)
		stores[i] = s
		go func() {
			ss, err := s.BeginWalk(Record{Start: time.Now()}, walkOf(t, repo))
			if err != nil {
				errs <- err
				return
			}
			manyFiles(t, repo, fmt.Sprintf("s%d", i), 2100)
			errs <- ss.FinishWalk(Record{End: time.Now()}, walkOf(t, repo))
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	s := stores[0]
	recs, err := s.Sessions()
	must(t, err)
	if len(recs) != 2 {
		t.Fatalf("%d sessions, want 2", len(recs))
	}
	t.Logf("batches: %d, %d", stores[0].preStaged, stores[1].preStaged)
	// One more record, with no change, is the tree's.
	id := record(t, s, Record{Start: time.Now()}, nil)
	red9Compare(t, s, shadowGit(t, s, "rev-parse", "refs/sessions/"+id+"^{tree}"), red9TreeByGit(t, repo))
	red9Clean(t, s)
}

// As an ordinary user: a file of a later batch made unreadable and a directory
// made unreadable after the listing, and a file made unreadable after its batch
// staged it. The batch fails (or stages what it can), the sweep names what Git
// could not read; the record holds what Git could, the store is whole.
func TestRed9PrestageUnreadableAfterListing(t *testing.T) {
	if !testenv.AsTestUser(t) {
		return
	}
	repo := newRepo(t, map[string]string{"tracked.txt": "t\n"})
	manyFiles(t, repo, "src", 2500)
	s, _ := openStore(t, repo)
	tree, notes := red9Sweep(t, s, func(n int) {
		if n == 1000 {
			must(t, os.Chmod(filepath.Join(repo, "src", "d015", "f000.txt"), 0))
			must(t, os.Chmod(filepath.Join(repo, "src", "d020"), 0))
			must(t, os.Chmod(filepath.Join(repo, "src", "d000", "f001.txt"), 0))
		}
	})
	t.Logf("batches %d, notes: %q", s.preStaged, notes)
	defer os.Chmod(filepath.Join(repo, "src", "d020"), 0o755)
	red9CompareRaced(t, s, tree, red9TreeByGit(t, repo), "src/d000/f001.txt")
	red9Clean(t, s)
}

// A layout file of another byte order (or the big-endian one of older versions)
// naming the index is not read as this host's offsets: the staging reads the
// index the slow way, stages right, and keeps a layout in the host's order.
func TestLayoutOtherByteOrderNotUsed(t *testing.T) {
	repo := newRepo(t, map[string]string{"a.txt": "a\n", "d/b.txt": "b\n", "d/c.txt": "c\n"})
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, nil)
	orig, l := red9Layout(t, s)
	indexPath := filepath.Join(s.Dir, "index")
	other := byte('b')
	if layoutOrder() == 'b' {
		other = 'l'
	}
	for _, magic := range []string{"ABXL", "ABX" + string(other)} {
		must(t, os.WriteFile(indexPath, orig, 0o644))
		key := red9Key(t, s)
		f := append([]byte(magic), key...)
		f = binary.BigEndian.AppendUint32(f, uint32(len(l.offsets)))
		f = binary.BigEndian.AppendUint32(f, uint32(l.ext))
		for _, off := range l.offsets {
			if magic[3] == 'l' {
				f = binary.LittleEndian.AppendUint32(f, off)
			} else {
				f = binary.BigEndian.AppendUint32(f, off)
			}
		}
		must(t, os.WriteFile(filepath.Join(s.Dir, layoutFile), f, 0o600))
		if _, _, ok := s.readLayout(orig, key); ok {
			t.Fatalf("a layout file with magic %q was read as this host's", magic)
		}
		write(t, filepath.Join(repo, "d/b.txt"), "edited "+magic+"\n")
		tree, _, err := s.stageInPlace([]string{"d/b.txt"})
		if err != nil {
			t.Fatalf("magic %q: the staging in place failed: %v", magic, err)
		}
		red9Compare(t, s, tree, red9TreeByGit(t, repo))
		kept, err := os.ReadFile(filepath.Join(s.Dir, layoutFile))
		must(t, err)
		if string(kept[:4]) != "ABX"+string(layoutOrder()) {
			t.Fatalf("magic %q: the layout kept after the staging starts %q", magic, kept[:4])
		}
		orig, l = red9Layout(t, s)
	}
}
