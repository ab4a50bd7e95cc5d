package shadow

import (
	"bytes"
	"math/rand/v2"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/fixedjson/fixedjsontest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// commitAsConcatenated is a record's commit body as the recorder built it before it
// was built in one buffer: the head's lines, subject and record joined as strings.
func commitAsConcatenated(t *testing.T, tree, parent string, rec Record, what string, when time.Time) []byte {
	t.Helper()
	rec.StartCommit, rec.EndCommit = "", ""
	body, err := marshalRecordReflect(rec)
	if err != nil {
		t.Fatal(err)
	}
	subject := "agentbox session " + rec.ID
	if what != "" {
		subject += ": " + what
	} else if len(rec.Command) > 0 {
		subject += ": " + oneLine(strings.Join(rec.Command, " "), 60)
	}
	date := strconv.FormatInt(when.Unix(), 10) + " " + when.Format("-0700")
	head := "tree " + tree + "\n"
	if parent != "" {
		head += "parent " + parent + "\n"
	}
	head += "author " + ident + " " + date + "\n" + "committer " + ident + " " + date + "\n\n"
	return []byte(head + subject + "\n\n" + string(body))
}

// TestRecordCommitBytes: the commit body built in one buffer is, byte for byte,
// the head, subject and record (as encoding/json writes it) joined, with and
// without a parent, in several zones, for random and full records.
func TestRecordCommitBytes(t *testing.T) {
	rnd := rand.New(rand.NewPCG(5, 36))
	zones := []*time.Location{time.UTC, time.FixedZone("", -(9*3600 + 30*60)), time.FixedZone("", 13*3600+45*60)}
	tree, parent := strings.Repeat("ab", 20), strings.Repeat("0f", 20)
	for i := range 500 {
		var rec Record
		fixedjsontest.Fill(&rec, rnd, i%4 == 0)
		rec.End = rec.End.Round(0) // a time outside 0–9999 is MarshalRecord's case, not this
		when := time.Unix(int64(rnd.Uint32()), 0).In(zones[i%len(zones)])
		p, what := parent, ""
		if i%2 == 0 {
			p, what = "", "start state"
		}
		got, err := recordCommit(tree, p, rec, what, when)
		if err != nil {
			if _, jerr := marshalRecordReflect(rec); jerr != nil {
				continue // encoding/json refuses it too
			}
			t.Fatalf("record %d: %v", i, err)
		}
		if want := commitAsConcatenated(t, tree, p, rec, what, when); !bytes.Equal(got, want) {
			t.Fatalf("record %d:\n%s\nwant\n%s", i, got, want)
		}
	}
	if _, err := recordCommit("not an id", "", Record{}, "", time.Now()); err == nil {
		t.Fatal("a bad tree id was taken")
	}
	if _, err := recordCommit(tree, "", Record{}, "", time.Unix(-1, 0)); err == nil {
		t.Fatal("a date before 1970 was taken")
	}
}

// TestRecordCommitReadByGit: the commit written is one Git reads, with the record
// as its message.
func TestRecordCommitReadByGit(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", "--bare", dir).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	s := &Store{Dir: dir}
	rec := Record{ID: "20261207-110000-abcdef", Command: []string{"true"}, Phases: []Phase{{Name: "host: record start", NS: 5}}}
	id, err := s.commit(emptyTree, "", rec, "", time.Unix(1796640462, 0))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("git", "--git-dir", dir, "fsck", "--strict", "--no-dangling").CombinedOutput(); err != nil {
		t.Fatalf("git fsck: %v %s", err, out)
	}
	msg, err := exec.Command("git", "--git-dir", dir, "log", "-1", "--format=%B", id).Output()
	body, _ := MarshalRecord(rec)
	if err != nil || !bytes.Contains(msg, body) || !strings.HasPrefix(string(msg), "agentbox session "+rec.ID+": true\n\n") {
		t.Fatalf("git log: %v\n%s", err, msg)
	}
}

// TestRecordCommitAllocates: a launch's end commit (its record a few KiB, most of it
// the phases) is built and compressed with fresh memory of at most four times its
// size: the compact record, the body, the zlib stream. Each copy more is pages the
// launcher, its collector off, first touches on the session's critical path.
func TestRecordCommitAllocates(t *testing.T) {
	if testenv.RaceBuild {
		t.Skip("the race detector allocates beside what it instruments: the count is the plain build's")
	}
	rec := Record{ID: "20261207-110000-abcdef", Repo: "/home/u/repo", Command: []string{"true"}, Args: []string{"--", "true"}}
	for i := range 60 {
		rec.Phases = append(rec.Phases, Phase{Name: "ro-bind /usr/lib/git-core/git-http-push " + strconv.Itoa(i), NS: int64(i) * 12345})
	}
	tree := strings.Repeat("ab", 20)
	when := time.Unix(1796640462, 0)
	build := func() int {
		b, err := recordCommit(tree, tree, rec, "", when)
		if err != nil {
			t.Fatal(err)
		}
		hdr, _ := objectID("commit", b)
		z, err := deflateObject(hdr, b)
		if err != nil {
			t.Fatal(err)
		}
		return len(z)
	}
	build() // the first call's one-time work
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	n := build()
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > uint64(4*n) {
		t.Fatalf("building a %d-byte commit allocated %d bytes, want at most %d", n, got, 4*n)
	}
}
