package shadow

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Many medium files that add up: past maxRecordBytes of content one staging reads
// no more, names the rest, and reads what it says.
func TestRecordByteBound(t *testing.T) {
	defer func(n int64) { maxRecordBytes = n }(maxRecordBytes)
	maxRecordBytes = 10 << 10
	repo := newRepo(t, map[string]string{"README": "hi\n"})
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, nil)
	body := strings.Repeat("x", 4<<10)
	id := record(t, s, Record{Start: time.Now()}, func() {
		for i := range 5 {
			write(t, filepath.Join(repo, "gen", fmt.Sprintf("f%d", i)), body)
		}
	})
	rec := sessionByID(t, s, id)
	if rec.NotRecordedCount != 3 || rec.ReadBytes != 8<<10 {
		t.Fatalf("not recorded %d %+v, read %d; want 3 left out past the bound, 8 KiB read", rec.NotRecordedCount, rec.NotRecorded, rec.ReadBytes)
	}
	for _, sk := range rec.NotRecorded {
		if !strings.Contains(sk.Reason, "past the record's bound") {
			t.Errorf("%s: %s", sk.Path, sk.Reason)
		}
	}
	if files := shadowGit(t, s, "ls-tree", "-r", "--name-only", rec.EndCommit); strings.Count(files, "gen/") != 2 {
		t.Errorf("end state holds %q; want the two files read", files)
	}
}

// A tracked file that grows past the bound (here: becomes sparse) is left out and
// named, not read, and named again by the next session, which reads nothing more.
func TestRecordTrackedFileTurnedSparse(t *testing.T) {
	repo := newRepo(t, map[string]string{"README": "hi\n", "data.bin": "small\n"})
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, nil)
	id := record(t, s, Record{Start: time.Now()}, func() {
		if err := os.Truncate(filepath.Join(repo, "data.bin"), 3<<30); err != nil {
			t.Fatal(err)
		}
	})
	rec := sessionByID(t, s, id)
	if len(rec.NotRecorded) != 1 || rec.NotRecorded[0].Path != "data.bin" || !strings.Contains(rec.NotRecorded[0].Reason, "sparse") {
		t.Fatalf("not recorded: %+v %q", rec.NotRecorded, rec.Notes)
	}
	id = record(t, s, Record{Start: time.Now()}, func() { write(t, filepath.Join(repo, "README"), "again\n") })
	if rec := sessionByID(t, s, id); len(rec.NotRecorded) != 1 || rec.ReadBytes > 100 {
		t.Errorf("next session: not recorded %+v, read %d", rec.NotRecorded, rec.ReadBytes)
	}
}

// The end of a session is bounded in time: past the record's deadline no Git
// runs, the end state is the start state, and the record says so where `agentbox
// log` counts it.
func TestRecordDeadline(t *testing.T) {
	defer func(d time.Duration) { recordDeadline = d }(recordDeadline)
	repo := newRepo(t, map[string]string{"README": "hi\n"})
	s, _ := openStore(t, repo)
	ss, err := s.BeginWalk(Record{Start: time.Now()}, walkOf(t, repo))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(repo, "new.txt"), "new\n")
	recordDeadline = -time.Second // already past when the end starts
	if err := ss.FinishWalk(Record{End: time.Now()}, walkOf(t, repo)); err != nil {
		t.Fatal(err)
	}
	rec := sessionByID(t, s, ss.ID())
	if rec.NotRecordedCount != 1 || rec.NotRecorded[0].Path != "." || !strings.Contains(rec.NotRecorded[0].Reason, "deadline") {
		t.Errorf("not recorded: %d %+v", rec.NotRecordedCount, rec.NotRecorded)
	}
	if start := shadowGit(t, s, "rev-parse", rec.StartCommit+"^{tree}"); shadowGit(t, s, "rev-parse", rec.EndCommit+"^{tree}") != start {
		t.Errorf("the end state is not the start state")
	}
}

// sessionByID is the record of session id.
func sessionByID(t *testing.T, s *Store, id string) Record {
	t.Helper()
	recs, err := s.Sessions()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("no session %s", id)
	return Record{}
}

// The record's notes are bounded whatever Git says: the sandbox decides how many
// files it complains about.
func TestGitMessagesBounded(t *testing.T) {
	var b strings.Builder
	for i := range 10000 {
		fmt.Fprintf(&b, "error: open(\"f%d\"): Permission denied\nhint: x\n", i)
	}
	b.WriteString("error: " + strings.Repeat("n", 100000) + "\n")
	msgs := gitMessages(b.String())
	if len(msgs) != maxNamed+1 || !strings.Contains(msgs[maxNamed], "9951 more") {
		t.Fatalf("%d messages, last %q", len(msgs), msgs[len(msgs)-1])
	}
	for _, m := range msgs {
		if len(m) > maxNameLen+len("…") {
			t.Errorf("a message of %d bytes", len(m))
		}
	}
}

// What a record names is bounded in count, however much the session made: 60
// FIFOs are counted, 50 named; a nested repository's work tree past the entry
// bound is said to be not all checked.
func TestUnseenBounded(t *testing.T) {
	defer func(n int) { maxUnseenIn = n }(maxUnseenIn)
	maxUnseenIn = 40
	repo := newRepo(t, map[string]string{"README": "hi\n"})
	if out, err := exec.Command("git", "init", "-q", filepath.Join(repo, "sub")).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, nil)
	id := record(t, s, Record{Start: time.Now()}, func() {
		for i := range 60 {
			if err := syscall.Mkfifo(filepath.Join(repo, fmt.Sprintf("p%02d", i)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 60 {
			write(t, filepath.Join(repo, "sub", ".git", "x", fmt.Sprintf("f%02d", i)), "x\n")
		}
	})
	rec := sessionByID(t, s, id)
	if len(rec.NotRecorded) != maxNamed || rec.NotRecordedCount < 60 {
		t.Errorf("named %d, counted %d", len(rec.NotRecorded), rec.NotRecordedCount)
	}
	if notes := strings.Join(rec.Notes, "\n"); !strings.Contains(notes, "not all checked") {
		t.Errorf("notes: %q", rec.Notes)
	}
}
