package shadow

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A FIFO where Git opens a file stops the recorder's Git at once, named; the test's
// own timeout is the hang detector.
func TestFIFOStopsRecorderGit(t *testing.T) {
	for _, hold := range []bool{false, true} {
		hold := hold
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
			if err != nil {
				t.Fatalf("Begin: %v", err)
			}
			if len(warned) != 1 || !strings.Contains(warned[0], "blocked on "+fifo) {
				t.Errorf("Warn got %q", warned)
			}
			if err := ss.Finish(Record{End: time.Now()}); err != nil {
				t.Fatal(err)
			}
			rec := onlySession(t, s)
			notes := strings.Join(rec.Notes, "\n")
			if !strings.Contains(notes, "start: sub not recorded") || !strings.Contains(notes, "end: sub not recorded") || !strings.Contains(notes, "blocked on "+fifo) {
				t.Errorf("the record's notes do not name the FIFO and what was left out: %q", rec.Notes)
			}
			// The rest is recorded.
			if files := shadowGit(t, s, "ls-tree", "-r", "--name-only", rec.EndCommit); !strings.Contains(files, "README") || strings.Contains(files, "sub/") {
				t.Errorf("end state holds %q; want README and nothing of sub/", files)
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

// A sparse file of 2 GiB (nothing on disk, minutes to hash) is left out of the
// record, named, and the rest is recorded.
func TestHugeFileLeftOut(t *testing.T) {
	repo := newRepo(t, map[string]string{"README": "hi\n"})
	big := filepath.Join(repo, "big.img")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(2 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, nil)
	rec := onlySession(t, s)
	if rec.NotRecordedCount != 1 || len(rec.NotRecorded) != 1 || rec.NotRecorded[0].Path != "big.img" ||
		!strings.Contains(rec.NotRecorded[0].Reason, "sparse file (2.0 GiB") {
		t.Errorf("not recorded: %d %+v", rec.NotRecordedCount, rec.NotRecorded)
	}
	if files := shadowGit(t, s, "ls-tree", "-r", "--name-only", rec.EndCommit); !strings.Contains(files, "README") || strings.Contains(files, "big.img") {
		t.Errorf("end state holds %q", files)
	}
}

// A Git command whose process group outlives it, holding its stdout (a helper it
// left in the background), ends when Git does: the group is killed then, so the
// output is whole and no timer decides whether Wait's copying finished.
func TestGitGroupOutlivingGit(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "git")
	pidFile := filepath.Join(dir, "helper.pid")
	script := "#!/bin/sh\nsleep 600 &\necho $! > " + pidFile + "\necho out\necho err >&2\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	// Should the helper keep Wait waiting, the time bound ends it, failing below.
	defer func(d time.Duration) { gitTimeout = d }(gitTimeout)
	gitTimeout = 30 * time.Second
	g := git{bin: bin, gitDir: dir}
	out, errOut, err := g.run3(nil, strings.NewReader("in\n"), "status")
	if err != nil || string(out) != "out\n" || string(errOut) != "err\n" {
		t.Fatalf("stdout %q, stderr %q, %v; want the whole output and no error", out, errOut, err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	// Killed: gone, or a zombie its new parent has yet to reap, once the kill
	// has run its course (a moment on a loaded machine; bounded against a hang).
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		st, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		i := strings.LastIndexByte(string(st), ')')
		if i < 0 || strings.HasPrefix(string(st[i+1:]), " Z") {
			break
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the helper Git left (%d) still runs: %s", pid, st)
		}
	}
}
