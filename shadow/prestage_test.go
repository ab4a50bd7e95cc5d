package shadow

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// manyFiles writes n small files below dir/sub, 100 to a directory.
func manyFiles(t *testing.T, dir, sub string, n int) {
	t.Helper()
	for i := range n {
		write(t, filepath.Join(dir, sub, fmt.Sprintf("d%03d", i/100), fmt.Sprintf("f%03d.txt", i%100)), fmt.Sprintf("file %d\n", i))
	}
}

// treeByGit is the tree plain `git add --all` of repo's working tree into a fresh
// index makes: what the record must hold.
func treeByGit(t *testing.T, repo string) string {
	t.Helper()
	idx := filepath.Join(t.TempDir(), "index")
	for _, args := range [][]string{{"add", "--all"}, {"write-tree"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=/usr/local/bin:/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1", "GIT_INDEX_FILE=" + idx}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		if args[0] == "write-tree" {
			return strings.TrimSpace(string(out))
		}
	}
	return ""
}

// TestPreStageRecordsWhatAddWould: a first record of many new files stages them in
// batches before its sweep (prestage.go), and records exactly the tree `git add
// --all` makes: ignored files and directories left out, a nested repository as its
// commit, symlinks, executable bits, names with pathspec magic, spaces and
// newlines; with no unfinished pack left behind, and a progress line per batch.
func TestPreStageRecordsWhatAddWould(t *testing.T) {
	defer func(b int) { preStageBatch = b }(preStageBatch)
	preStageBatch = 1000
	repo := newRepo(t, map[string]string{"tracked.txt": "t\n", ".gitignore": "*.log\nbuild/\n"})
	manyFiles(t, repo, "src", 2600)
	manyFiles(t, repo, "build", 300) // ignored
	for _, name := range []string{"a.log", "src/d000/x.log", ":(glob)*", "sp ace", "new\nline", "-dash", "*"} {
		write(t, filepath.Join(repo, name), name+"\n")
	}
	write(t, filepath.Join(repo, "run.sh"), "#!/bin/sh\n")
	if err := os.Chmod(filepath.Join(repo, "run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../tracked.txt", filepath.Join(repo, "src", "link")); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	hostGit(t, home, repo, "init", "-q", "nested")
	write(t, filepath.Join(repo, "nested", "n.txt"), "n\n")
	hostGit(t, home, filepath.Join(repo, "nested"), "add", "n.txt")
	hostGit(t, home, filepath.Join(repo, "nested"), "commit", "-q", "-m", "n")

	s, _ := openStore(t, repo)
	var progress strings.Builder
	s.Progress = &progress
	id := record(t, s, Record{Start: time.Now()}, nil)
	if s.preStaged != 3 {
		t.Errorf("%d batches staged before the sweep, want 3 (2,600 new files by 1,000)", s.preStaged)
	}
	want := treeByGit(t, repo)
	if got := shadowGit(t, s, "rev-parse", "refs/sessions/"+id+"^{tree}"); got != want {
		t.Errorf("recorded tree %s, git add --all's %s:\n%s", got, want, shadowGit(t, s, "diff-tree", "-r", "--name-status", want, got))
	}
	if tmp, _ := filepath.Glob(filepath.Join(s.Dir, "objects", "pack", "tmp_*")); len(tmp) != 0 {
		t.Errorf("unfinished pack files left: %v", tmp)
	}
	notes := strings.Join(onlySession(t, s).Notes, "\n")
	if !strings.Contains(notes, "embedded git repository: nested") {
		t.Errorf("notes lack the nested repository:\n%s", notes)
	}
	shadowGit(t, s, "fsck", "--no-progress")
}

// TestPreStageStopsAtAFailedBatch: a batch Git refuses (a file the agent made
// unreadable) ends the head start without a trace — no lock, no unfinished pack —
// and the sweep records everything else and names the file.
func TestPreStageStopsAtAFailedBatch(t *testing.T) {
	if !testenv.AsTestUser(t) { // root would read what the test makes unreadable
		return
	}
	defer func(b int) { preStageBatch = b }(preStageBatch)
	preStageBatch = 1000
	repo := newRepo(t, map[string]string{"tracked.txt": "t\n"})
	manyFiles(t, repo, "src", 2500)
	locked := filepath.Join(repo, "src", "d015", "f000.txt") // in the second batch
	if err := os.Chmod(locked, 0); err != nil {
		t.Fatal(err)
	}
	s, _ := openStore(t, repo)
	id := record(t, s, Record{Start: time.Now()}, nil)
	if s.preStaged != 1 {
		t.Errorf("%d batches staged, want 1: the second fails", s.preStaged)
	}
	if tmp, _ := filepath.Glob(filepath.Join(s.Dir, "objects", "pack", "tmp_*")); len(tmp) != 0 {
		t.Errorf("the failed batch's pack files are left: %v", tmp)
	}
	if _, err := os.Lstat(filepath.Join(s.Dir, "index.lock")); err == nil {
		t.Error("index.lock left")
	}
	files := shadowGit(t, s, "ls-tree", "-r", "--name-only", "refs/sessions/"+id)
	if n := strings.Count(files, "\n") + 1; n != 2500 || strings.Contains(files, "d015/f000.txt") {
		t.Errorf("%d files recorded, want 2,500 without the unreadable one", n)
	}
	if notes := strings.Join(onlySession(t, s).Notes, "\n"); !strings.Contains(notes, "d015/f000.txt") {
		t.Errorf("notes do not name the unreadable file:\n%s", notes)
	}
}

// TestManyNewFilesSweepWithHeadStart: a session that makes more new files than
// maxChangedPaths, all in one new directory (one pathspec), sweeps with the head
// start instead of one `git add` of them all.
func TestManyNewFilesSweepWithHeadStart(t *testing.T) {
	defer func(b int) { preStageBatch = b }(preStageBatch)
	preStageBatch = 1000
	repo := newRepo(t, map[string]string{"tracked.txt": "t\n"})
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, nil)
	if s.preStaged != 0 {
		t.Fatalf("%d batches for a one-file first record", s.preStaged)
	}
	sweeps := s.sweeps
	id := record(t, s, Record{Start: time.Now()}, func() { manyFiles(t, repo, "vendor", 2100) })
	if s.sweeps != sweeps+1 || s.preStaged != 3 {
		t.Errorf("sweeps %d → %d, batches %d: want one sweep with 3 batches", sweeps, s.sweeps, s.preStaged)
	}
	if got, want := shadowGit(t, s, "rev-parse", "refs/sessions/"+id+"^{tree}"), treeByGit(t, repo); got != want {
		t.Errorf("recorded tree %s, git add --all's %s", got, want)
	}
	recs, err := s.Sessions()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.ID == id && r.Files.Added != 2100 {
			t.Errorf("files %+v, want 2,100 added", r.Files)
		}
	}
}
