package shadow

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A FIFO where Git opens a file stops the recorder's Git at once, named; the test's
// own timeout is the hang detector.
func TestFIFOStopsRecorderGit(t *testing.T) {
	for _, hold := range []bool{false, true} {
		name := "open waits"
		if hold {
			name = "read waits" // a writer holds the FIFO: open succeeds, read blocks
		}
		t.Run(name, func(t *testing.T) {
			repo := newRepo(t, map[string]string{"README": "hi\n", "sub/f": "x\n"})
			fifo := filepath.Join(repo, "sub/.gitattributes")
			if err := syscall.Mkfifo(fifo, 0o644); err != nil {
				t.Fatal(err)
			}
			if hold {
				w, err := os.OpenFile(fifo, os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
			}
			s, _ := openStore(t, repo)
			var warned []string
			s.Warn = func(l string) { warned = append(warned, l) }
			ss, err := s.Begin(Record{Start: time.Now()})
			var be *BoundError
			if !errors.As(err, &be) || be.Blocked != fifo {
				t.Fatalf("Begin: %v; want a BoundError naming %s", err, fifo)
			}
			if len(warned) != 1 || !strings.Contains(warned[0], "blocked on "+fifo) {
				t.Errorf("Warn got %q", warned)
			}
			if err := ss.Finish(Record{End: time.Now()}); err != nil {
				t.Fatal(err)
			}
			rec := onlySession(t, s)
			if !strings.Contains(strings.Join(rec.Notes, "\n"), "blocked on "+fifo) {
				t.Errorf("the record's notes do not name the FIFO: %q", rec.Notes)
			}
			// The lock is free again: the next session records (the FIFO gone).
			os.Remove(fifo)
			record(t, s, Record{Start: time.Now()}, nil)
		})
	}
}

// A Git command past its time bound is killed with its process group.
func TestGitTimeBound(t *testing.T) {
	defer func(d time.Duration) { gitTimeout = d }(gitTimeout)
	gitTimeout = 300 * time.Millisecond
	s, _ := openStore(t, newRepo(t, nil))
	r, w, err := os.Pipe() // an *os.File: Git holds it, no copying goroutine does
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	defer r.Close()
	_, err = s.git.run(r, "hash-object", "--stdin")
	var be *BoundError
	if !errors.As(err, &be) || be.Timeout == 0 {
		t.Fatalf("hash-object on a stdin that never ends: %v; want the time bound", err)
	}
}

// The Git the recorder runs on the working tree finds only the stub as "git".
func TestRecorderRunsNoOtherGit(t *testing.T) {
	s, _ := openStore(t, newRepo(t, nil))
	b, err := os.ReadFile(filepath.Join(s.Dir, noExecDir, "git"))
	if err != nil || string(b) != noExecGit {
		t.Fatalf("stub: %q, %v", b, err)
	}
	wt := s.git
	wt.workTree = s.Repo
	found := false
	for _, e := range wt.env() {
		found = found || e == "GIT_EXEC_PATH="+filepath.Join(s.Dir, noExecDir)
	}
	if !found {
		t.Errorf("work-tree env without the stub exec path: %q", wt.env())
	}
}
