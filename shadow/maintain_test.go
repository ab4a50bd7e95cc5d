package shadow

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// looseObjects counts the loose objects of the shadow repository.
func looseObjects(t *testing.T, s *Store) int {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(s.Dir, "objects", "??", "*"))
	return len(m)
}

func packCount(s *Store) int {
	m, _ := filepath.Glob(filepath.Join(s.Dir, "objects", "pack", "*.pack"))
	return len(m)
}

// TestFirstRecordIsPacked: the first record of many files writes their content as
// a pack, not as one loose object (a 4 KiB block at least) per file, and the store
// stays within a small multiple of the content.
func TestFirstRecordIsPacked(t *testing.T) {
	files := map[string]string{}
	for i := 0; i < 2000; i++ {
		files[fmt.Sprintf("d%02d/f%04d.txt", i/100, i)] = fmt.Sprintf("file %d\n%s\n", i, strings.Repeat("x", i%50))
	}
	repo := newRepo(t, files)
	s, _ := openStore(t, repo)
	record(t, s, Record{Command: []string{"true"}}, func() {})
	// Commits and trees may stay loose (a handful); the 2000 blobs must not.
	if n := looseObjects(t, s); n > 100 {
		t.Errorf("%d loose objects after the first record of 2000 files, want them packed", n)
	}
	if size := dirSize(t, filepath.Join(s.Dir, "objects")); size > 2<<20 {
		t.Errorf("objects take %d bytes for about 60 KB of content", size)
	}
	if got := shadowGit(t, s, "ls-tree", "-r", "--name-only", "refs/sessions/"+onlySession(t, s).ID); strings.Count(got, "\n")+1 != 2000 {
		t.Errorf("the record holds %d paths, want 2000", strings.Count(got, "\n")+1)
	}
}

// TestPacksAreMerged: sessions that each add a file add a small pack each (`git
// add`'s bulk check-in; a file only edited in place is staged without Git, loose,
// inplace.go); once there are more than maxPacks, the recorder merges them, and
// every session still reads back.
func TestPacksAreMerged(t *testing.T) {
	repo := newRepo(t, map[string]string{"a.txt": "a\n"})
	s, _ := openStore(t, repo)
	var ids []string
	for i := 0; i < maxPacks+4; i++ {
		ids = append(ids, record(t, s, Record{Command: []string{"true"}}, func() {
			write(t, filepath.Join(repo, "a.txt"), fmt.Sprintf("version %d\n", i))
			write(t, filepath.Join(repo, fmt.Sprintf("new%02d.txt", i)), "n\n")
		}))
		if n := packCount(s); n > maxPacks+1 {
			t.Fatalf("session %d: %d packs, want at most %d", i, n, maxPacks+1)
		}
	}
	// The merge packed the loose commits and trees too (20 sessions leave 60+).
	if n := looseObjects(t, s); n > 30 {
		t.Errorf("%d loose objects after %d sessions, want the older ones packed", n, len(ids))
	}
	for i, id := range ids {
		if got := shadowGit(t, s, "show", "refs/sessions/"+id+":a.txt"); got != fmt.Sprintf("version %d", i) {
			t.Errorf("session %d: a.txt is %q", i, got)
		}
	}
	shadowGit(t, s, "fsck", "--no-progress")
}

// TestFirstRecordNotice: a first record that lasts longer than a second says so on
// the terminal, and when it finished; a short one says nothing.
func TestFirstRecordNotice(t *testing.T) {
	repo := newRepo(t, map[string]string{"a.txt": "a\n"})
	s, _ := openStore(t, repo)
	var out bytes.Buffer
	s.Progress = &out
	n := s.noticeStart(s.firstRecord(), "recording X")
	// The first line comes from a timer, which a loaded machine runs late:
	// wait for it, bounded against a hang.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		n.mu.Lock()
		shown := n.shown
		n.mu.Unlock()
		if shown {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no first line a minute after the work started")
		}
	}
	if since := time.Since(n.t0); since < noticeAfter {
		t.Fatalf("the first line came after %s, before noticeAfter (%s)", since, noticeAfter)
	}
	n.mu.Lock()
	n.last = time.Now() // the step below comes right after the first line
	n.mu.Unlock()
	n.step(1000, 2500) // too soon after the first line: nothing
	n.mu.Lock()
	n.last = n.last.Add(-stepEvery)
	n.mu.Unlock()
	n.step(1000, 102500)
	n.end()
	n.step(2500, 2500) // after the end: nothing
	if got, want := out.String(), "agentbox: recording X …\nagentbox: recording X: 1,000 of 102,500 files\nagentbox: recording X: done in"; !strings.HasPrefix(got, want) || strings.Count(got, "\n") != 3 {
		t.Errorf("notice %q, want %q…", got, want)
	}
	out.Reset()
	s.noticeStart(true, "short").end()
	if out.Len() != 0 {
		t.Errorf("a short step printed %q", out.String())
	}
	record(t, s, Record{Command: []string{"true"}}, func() {})
	if s.firstRecord() {
		t.Error("firstRecord after a record")
	}
	if _, err := os.Stat(filepath.Join(s.Dir, "index")); err != nil {
		t.Fatal(err)
	}
}

// TestPackedBesideTheCommand: the packing check runs once a session's start is
// recorded, beside its command (BeginWalk), not after the command, where the
// launcher's exit would wait for it: packs past maxPacks before a session are
// merged by the time its start is, and its end writes no pack of its own.
func TestPackedBesideTheCommand(t *testing.T) {
	repo := newRepo(t, map[string]string{"a.txt": "a\n"})
	s, _ := openStore(t, repo)
	record(t, s, Record{Command: []string{"true"}}, nil)
	for i := range maxPacks + 2 {
		hash := exec.Command("git", "--git-dir", s.Dir, "hash-object", "-w", "--stdin")
		hash.Stdin = strings.NewReader(fmt.Sprintf("planted %d\n", i))
		id, err := hash.Output()
		if err != nil {
			t.Fatal(err)
		}
		pack := exec.Command("git", "--git-dir", s.Dir, "pack-objects", "-q", filepath.Join(s.Dir, "objects", "pack", "pack"))
		pack.Stdin = bytes.NewReader(id)
		if out, err := pack.CombinedOutput(); err != nil {
			t.Fatalf("git pack-objects: %v %s", err, out)
		}
	}
	if n := packCount(s); n <= maxPacks {
		t.Fatalf("%d packs planted, want more than %d", n, maxPacks)
	}
	ss, err := s.BeginWalk(Record{Command: []string{"true"}}, walkOf(t, repo))
	if err != nil {
		t.Fatal(err)
	}
	if err := ss.Wait(); err != nil {
		t.Fatal(err)
	}
	if n := packCount(s); n > maxPacks {
		t.Fatalf("%d packs once the start was recorded, want at most %d", n, maxPacks)
	}
	merged := packCount(s)
	if err := ss.FinishWalk(Record{Command: []string{"true"}, End: time.Now()}, walkOf(t, repo)); err != nil {
		t.Fatal(err)
	}
	if n := packCount(s); n != merged {
		t.Errorf("the unchanged session's end left %d packs, its start %d", n, merged)
	}
	shadowGit(t, s, "fsck", "--no-progress")
}
