package shadow

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/gitguard/audit"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/internal/treewalk"
)

// hostGit runs plain git in dir, as a user would, with no system config and HOME set
// to home: the control the hardened invocation is compared against.
func hostGit(t testing.TB, home, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = []string{
		"HOME=" + home, "PATH=/usr/local/bin:/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid",
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

// shadowGit reads the shadow repository with plain git (its own config is agentbox's).
func shadowGit(t testing.TB, s *Store, args ...string) string {
	t.Helper()
	return hostGit(t, t.TempDir(), s.Dir, append([]string{"--git-dir=" + s.Dir}, args...)...)
}

func write(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// newRepo is a Git repository with one commit holding files.
func newRepo(t testing.TB, files map[string]string) string {
	t.Helper()
	repo, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	hostGit(t, home, repo, "init", "-q")
	for name, content := range files {
		write(t, filepath.Join(repo, name), content)
	}
	hostGit(t, home, repo, "add", "-A")
	hostGit(t, home, repo, "commit", "-q", "--allow-empty", "-m", "init")
	return repo
}

func openStore(t testing.TB, repo string) (*Store, string) {
	t.Helper()
	state := filepath.Join(t.TempDir(), "state", "agentbox")
	s, err := Open(state, repo)
	if err != nil {
		t.Fatal(err)
	}
	return s, state
}

// record runs one session on s: Begin, change, Finish.
//
// Each staging takes the working tree's walk as the session does (the audit's,
// audit.Scan with Walk), so every test here runs the recorder's walk path
// (changed.go) as well as, on a first record, the full sweep.
func record(t testing.TB, s *Store, rec Record, change func()) string {
	t.Helper()
	ss, err := s.BeginWalk(rec, walkOf(t, s.Repo))
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	if change != nil {
		change()
	}
	rec.End = time.Now()
	if err := ss.FinishWalk(rec, walkOf(t, s.Repo)); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	return ss.ID()
}

// walkOf is the audit's walk of repo; nil when repo is gone.
func walkOf(t testing.TB, repo string) *treewalk.Walk {
	t.Helper()
	surf, err := audit.Scan(repo, audit.ScanOptions{Walk: true})
	if err != nil {
		return nil
	}
	return surf.Walk
}

func onlySession(t *testing.T, s *Store) Record {
	t.Helper()
	recs, err := s.Sessions()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 {
		t.Fatalf("got %d sessions, want 1: %+v", len(recs), recs)
	}
	return recs[0]
}

func TestSessionRecord(t *testing.T) {
	repo := newRepo(t, map[string]string{
		"keep.txt": "same\n", "edit.txt": "old\n", "gone.txt": "bye\n",
		".gitignore": "*.log\nbuild/\n",
	})
	write(t, filepath.Join(repo, "untracked-at-start.txt"), "u\n")
	s, _ := openStore(t, repo)
	start := time.Now().Add(-2 * time.Second)
	rec := Record{
		Command: []string{"sh", "-c", "edit"}, Args: []string{"--offline", "sh", "-c", "edit"},
		Backend: "native", BackendVersion: "agentbox test", Start: start, ExitStatus: 3,
		Phases:   []Phase{{Name: "clone", NS: 1200}, {Name: "mounts", NS: 800}},
		Policy:   Policy{Repo: repo, Workdir: repo, Offline: true, Backend: "native"},
		Snapshot: "/state/snap.zip", AuditFindings: []string{"new hook"},
	}
	id := record(t, s, rec, func() {
		write(t, filepath.Join(repo, "edit.txt"), "new\n")
		write(t, filepath.Join(repo, "new/file.txt"), "hello\n")
		write(t, filepath.Join(repo, "bin.dat"), "\x00\x01\x02binary")
		write(t, filepath.Join(repo, "debug.log"), "ignored\n")
		write(t, filepath.Join(repo, "build/out"), "ignored\n")
		if err := os.Remove(filepath.Join(repo, "gone.txt")); err != nil {
			t.Fatal(err)
		}
	})

	got := onlySession(t, s)
	if got.ID != id || !got.Complete || got.ExitStatus != 3 || got.Backend != "native" ||
		got.BackendVersion != "agentbox test" || !got.Start.Equal(start.Round(0)) ||
		got.Snapshot != "/state/snap.zip" || len(got.Phases) != 2 || got.Phases[0].NS != 1200 ||
		!got.Policy.Offline || got.Repo != repo || len(got.AuditFindings) != 1 ||
		strings.Join(got.Args, " ") != "--offline sh -c edit" {
		t.Errorf("record read back wrong: %+v", got)
	}
	if want := (Files{Added: 2, Changed: 1, Removed: 1}); got.Files != want {
		t.Errorf("files = %+v, want %+v", got.Files, want)
	}
	if got.StartCommit == "" || got.EndCommit == "" {
		t.Fatalf("commits not filled in: %+v", got)
	}
	if parent := shadowGit(t, s, "rev-parse", got.EndCommit+"^"); parent != got.StartCommit {
		t.Errorf("end commit's parent is %s, want the start commit %s", parent, got.StartCommit)
	}
	startFiles := shadowGit(t, s, "ls-tree", "-r", "--name-only", got.StartCommit)
	if !strings.Contains(startFiles, "untracked-at-start.txt") || strings.Contains(startFiles, ".git/") {
		t.Errorf("start tree: untracked file missing or .git recorded:\n%s", startFiles)
	}

	var diff bytes.Buffer
	if err := s.Diff(&diff, got, false); err != nil {
		t.Fatal(err)
	}
	d := diff.String()
	for _, want := range []string{"-old\n+new\n", "+hello\n", "deleted file mode", "Binary files /dev/null and b/bin.dat differ"} {
		if !strings.Contains(d, want) {
			t.Errorf("diff lacks %q:\n%s", want, d)
		}
	}
	for _, not := range []string{"debug.log", "build/out", "keep.txt", "binary"} {
		if strings.Contains(d, not) {
			t.Errorf("diff shows %q:\n%s", not, d)
		}
	}
	diff.Reset()
	if err := s.Diff(&diff, got, true); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(diff.String(), "4 files changed") {
		t.Errorf("diff --stat:\n%s", diff.String())
	}
}

func TestFailedLaunchRecordedWithError(t *testing.T) {
	repo := newRepo(t, map[string]string{"a": "a\n"})
	s, state := openStore(t, repo)
	id := record(t, s, Record{Command: []string{"true"}, Start: time.Now(), ExitStatus: 125,
		Error: "mount /home: permission denied"}, nil)
	_, got, err := Find(state, id[:len(id)-2])
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != id || got.Error != "mount /home: permission denied" || got.ExitStatus != 125 || got.Files != (Files{}) {
		t.Errorf("got %+v", got)
	}
}

func TestIncompleteSessionListed(t *testing.T) {
	repo := newRepo(t, map[string]string{"a": "a\n"})
	s, _ := openStore(t, repo)
	ss, err := s.Begin(Record{Command: []string{"agent"}, Start: time.Now()})
	if err == nil {
		err = ss.Wait()
	}
	if err != nil {
		t.Fatal(err)
	}
	got := onlySession(t, s)
	if got.ID != ss.ID() || got.Complete || got.EndCommit != "" || got.StartCommit == "" || got.Command[0] != "agent" {
		t.Errorf("got %+v", got)
	}
	if err := s.Diff(&bytes.Buffer{}, got, false); err == nil {
		t.Error("Diff of an incomplete session: no error")
	}
}

// plant puts into repo every way a Git repository can make Git run a program, each
// one touching its own marker file in markers when it runs.
func plant(t testing.TB, repo, markers string) {
	t.Helper()
	script := func(name string) string {
		path := filepath.Join(repo, ".git", "evil", name)
		write(t, path, fmt.Sprintf("#!/bin/sh\ntouch %s/%s\ncat\n", markers, name))
		if err := os.Chmod(path, 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	hooks := filepath.Join(repo, ".git", "evilhooks")
	for _, h := range []string{"pre-commit", "post-commit", "commit-msg", "reference-transaction", "post-index-change", "pre-auto-gc", "post-checkout"} {
		write(t, filepath.Join(hooks, h), fmt.Sprintf("#!/bin/sh\ntouch %s/hooksPath-%s\n", markers, h))
		write(t, filepath.Join(repo, ".git", "hooks", h), fmt.Sprintf("#!/bin/sh\ntouch %s/hook-%s\n", markers, h))
		for _, p := range []string{filepath.Join(hooks, h), filepath.Join(repo, ".git", "hooks", h)} {
			if err := os.Chmod(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	cfg := fmt.Sprintf(`
[core]
	fsmonitor = %s
	hooksPath = %s
	pager = touch %s/pager; cat
	excludesFile = %s/.git/evil/excludes
	attributesFile = %s/.git/evil/attributes
[alias]
	st = !touch %s/alias
[filter "evil"]
	clean = %s
	smudge = %s
	required = true
[diff "evil"]
	textconv = %s
[diff]
	external = %s
[include]
	path = %s/.git/evil/included
`, script("fsmonitor"), hooks, markers, repo, repo, markers,
		script("clean"), script("smudge"), script("textconv"), script("external"), repo)
	f, err := os.OpenFile(filepath.Join(repo, ".git", "config"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(cfg); err != nil {
		t.Fatal(err)
	}
	f.Close()
	write(t, filepath.Join(repo, ".git", "evil", "included"), fmt.Sprintf("[core]\n\tfsmonitor = %s\n", script("fsmonitor-included")))
	write(t, filepath.Join(repo, ".git", "evil", "excludes"), "excluded-by-core-excludesfile\n")
	write(t, filepath.Join(repo, ".git", "info", "exclude"), "excluded-by-info-exclude\n")
	attrs := "* filter=evil diff=evil merge=evil text eol=crlf ident\n"
	write(t, filepath.Join(repo, ".git", "evil", "attributes"), attrs)
	write(t, filepath.Join(repo, ".git", "info", "attributes"), attrs)
	write(t, filepath.Join(repo, ".gitattributes"), attrs)
	// A nested repository with its own fsmonitor.
	nested := filepath.Join(repo, "nested")
	hostGit(t, t.TempDir(), repo, "init", "-q", nested)
	write(t, filepath.Join(nested, "f"), "nested\n")
	hostGit(t, t.TempDir(), nested, "-c", "core.hooksPath=/dev/null", "add", "f")
	hostGit(t, t.TempDir(), nested, "-c", "core.hooksPath=/dev/null", "commit", "-q", "-m", "n")
	hostGit(t, t.TempDir(), nested, "config", "core.fsmonitor", script("fsmonitor-nested"))
}

// TestRepoGitSurfaceNeverRuns plants hooks, fsmonitor, filters, textconv, an external
// diff, a pager, aliases and attributes in the repository, shows that plain Git on the
// host runs them, and that the collector runs none of them.
func TestRepoGitSurfaceNeverRuns(t *testing.T) {
	content := "line one\nline $Id$ two\n"

	// The control: the plants are live for a plain git on the host.
	control := newRepo(t, map[string]string{"file.txt": content})
	controlMarkers := t.TempDir()
	plant(t, control, controlMarkers)
	write(t, filepath.Join(control, "file.txt"), content+"more\n")
	home := t.TempDir()
	hostGit(t, home, control, "add", "-A")
	hostGit(t, home, control, "commit", "-q", "-m", "x")
	hostGit(t, home, control, "diff", "HEAD~1", "HEAD")
	hostGit(t, home, control, "diff", "--no-ext-diff", "HEAD~1", "HEAD")
	fired := strings.Join(testenv.DirNames(t, controlMarkers), " ")
	for _, want := range []string{"fsmonitor", "hooksPath-pre-commit", "clean", "textconv", "external"} {
		if !strings.Contains(fired, want) {
			t.Fatalf("control: planted %s did not run under plain git (markers: %s); the test would prove nothing", want, fired)
		}
	}

	repo := newRepo(t, map[string]string{"file.txt": content})
	markers := t.TempDir()
	plant(t, repo, markers)
	for _, name := range []string{"excluded-by-info-exclude", "excluded-by-core-excludesfile"} {
		write(t, filepath.Join(repo, name), "recorded\n")
	}
	s, state := openStore(t, repo)
	id := record(t, s, Record{Command: []string{"agent"}, Start: time.Now()}, func() {
		write(t, filepath.Join(repo, "file.txt"), content+"more\n")
		write(t, filepath.Join(repo, "new.txt"), "new\n")
	})
	_, rec, err := Find(state, id)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := s.Diff(&out, rec, false); err != nil {
		t.Fatal(err)
	}
	if err := s.Diff(&out, rec, true); err != nil {
		t.Fatal(err)
	}
	if m := testenv.DirNames(t, markers); len(m) > 0 {
		t.Errorf("the collector ran planted programs: %v", m)
	}
	// The bytes recorded are the bytes on disk: no clean filter, ident or eol.
	if got := shadowGit(t, s, "cat-file", "blob", rec.EndCommit+":file.txt"); got+"\n" != content+"more\n" {
		t.Errorf("recorded file.txt = %q, want it byte for byte", got)
	}
	// Only the repository's .gitignore decides: its info/exclude and excludesFile do not.
	files := shadowGit(t, s, "ls-tree", "-r", "--name-only", rec.EndCommit)
	for _, want := range []string{"excluded-by-info-exclude", "excluded-by-core-excludesfile", ".gitattributes", "nested"} {
		if !strings.Contains(files, want) {
			t.Errorf("%s not recorded:\n%s", want, files)
		}
	}
	if !strings.Contains(out.String(), "+more") {
		t.Errorf("diff went through a textconv or external diff:\n%s", out.String())
	}
}

// TestGitFromRepoNeverRuns: a "git" in a $PATH directory inside the repository is
// skipped.
func TestGitFromRepoNeverRuns(t *testing.T) {
	repo := newRepo(t, map[string]string{"a": "a\n"})
	markers := t.TempDir()
	bin := filepath.Join(repo, "bin")
	write(t, filepath.Join(bin, "git"), "#!/bin/sh\ntouch "+markers+"/fake-git\nexit 1\n")
	if err := os.Chmod(filepath.Join(bin, "git"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", "bin:"+bin+":"+os.Getenv("PATH"))
	t.Chdir(repo)
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, nil)
	if m := testenv.DirNames(t, markers); len(m) > 0 {
		t.Errorf("the collector ran the repository's git: %v", m)
	}
	if !strings.HasPrefix(s.git.bin, "/") || strings.HasPrefix(s.git.bin, repo) {
		t.Errorf("git binary %s", s.git.bin)
	}
}

func TestStateDirInsideRepoRefused(t *testing.T) {
	repo := newRepo(t, map[string]string{"a": "a\n"})
	_, err := Open(filepath.Join(repo, ".state", "agentbox"), repo)
	if err == nil || !strings.Contains(err.Error(), "inside the repository") {
		t.Fatalf("Open with the state dir in the repository: %v", err)
	}
	// Also through a symlink that leads there.
	link := filepath.Join(t.TempDir(), "state")
	if err := os.Symlink(repo, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(filepath.Join(link, "agentbox"), repo); err == nil {
		t.Fatal("Open with the state dir reached through a symlink into the repository: no error")
	}
}

func TestSymlinksRecordedAsSymlinks(t *testing.T) {
	repo := newRepo(t, map[string]string{"a": "a\n"})
	outside := t.TempDir()
	write(t, filepath.Join(outside, "secret"), "do not record\n")
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, func() {
		for name, target := range map[string]string{"to-file": filepath.Join(outside, "secret"), "to-dir": outside, "dangling": "/nonexistent/x"} {
			if err := os.Symlink(target, filepath.Join(repo, name)); err != nil {
				t.Fatal(err)
			}
		}
	})
	rec := onlySession(t, s)
	tree := shadowGit(t, s, "ls-tree", "-r", rec.EndCommit)
	for _, name := range []string{"to-file", "to-dir", "dangling"} {
		if !strings.Contains(tree, "120000 blob") || !strings.Contains(tree, "\t"+name) {
			t.Errorf("%s not recorded as a symlink:\n%s", name, tree)
		}
	}
	if strings.Contains(tree, "secret") {
		t.Errorf("a symlink was followed:\n%s", tree)
	}
	if got := shadowGit(t, s, "cat-file", "blob", rec.EndCommit+":to-dir"); got != outside {
		t.Errorf("to-dir records %q, want the link target %q", got, outside)
	}
	if rec.Files.Added != 3 {
		t.Errorf("files %+v", rec.Files)
	}
}

func dirSize(t testing.TB, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestLargeFileStoredOnce(t *testing.T) {
	repo := newRepo(t, map[string]string{"a": "a\n"})
	s, _ := openStore(t, repo)
	const size = 8 << 20
	big := make([]byte, size) // random: compression cannot hide a second copy
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	record(t, s, Record{Start: time.Now()}, func() {
		if err := os.WriteFile(filepath.Join(repo, "generated.bin"), big, 0o644); err != nil {
			t.Fatal(err)
		}
	})
	objects := filepath.Join(s.Dir, "objects")
	first := dirSize(t, objects)
	if first < size {
		t.Fatalf("objects hold %d bytes after recording an %d-byte file", first, size)
	}
	for i := range 3 {
		record(t, s, Record{Start: time.Now()}, func() {
			write(t, filepath.Join(repo, "a"), fmt.Sprintf("change %d\n", i))
			// Rewritten with the same bytes: new mtime, same content.
			if err := os.WriteFile(filepath.Join(repo, "generated.bin"), big, 0o644); err != nil {
				t.Fatal(err)
			}
		})
	}
	if grown := dirSize(t, objects) - first; grown > size/4 {
		t.Errorf("three more sessions grew the objects by %d bytes; the %d-byte file was stored again", grown, size)
	}
}

func TestVanishedRepoRecordedWithNote(t *testing.T) {
	parent := t.TempDir()
	repo := filepath.Join(parent, "repo")
	write(t, filepath.Join(repo, "a"), "a\n")
	repo, _ = filepath.EvalSymlinks(repo)
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, func() {
		if err := os.RemoveAll(repo); err != nil {
			t.Fatal(err)
		}
	})
	rec := onlySession(t, s)
	if !rec.Complete || !strings.Contains(strings.Join(rec.Notes, "\n"), "end state not recorded: repository "+repo+": does not exist") {
		t.Errorf("record of a vanished repository: %+v", rec)
	}

	// Vanished before the start: the session is still recorded, with both notes.
	ss, err := s.Begin(Record{Start: time.Now()})
	if err == nil {
		t.Fatal("Begin on a missing repository: no error")
	}
	if err := ss.Finish(Record{ExitStatus: 125, Error: "repo: does not exist"}); err != nil {
		t.Fatal(err)
	}
	recs, err := s.Sessions()
	if err != nil || len(recs) != 2 {
		t.Fatalf("sessions: %v %+v", err, recs)
	}
	var got Record
	for _, r := range recs {
		if r.ID == ss.ID() {
			got = r
		}
	}
	if got.StartCommit != "" || got.EndCommit == "" || len(got.Notes) != 2 || got.Error == "" {
		t.Errorf("session without a start state: %+v", got)
	}
	var diff bytes.Buffer
	if err := s.Diff(&diff, got, false); err != nil || diff.Len() != 0 {
		t.Errorf("diff of an empty record: %v %q", err, diff.String())
	}
}

func TestConcurrentSessionsBothRecorded(t *testing.T) {
	repo := newRepo(t, map[string]string{"a": "a\n"})
	state := filepath.Join(t.TempDir(), "state")
	const n = 4
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Open(state, repo) // each session opens its own, as processes do
			if err != nil {
				errs <- err
				return
			}
			ss, err := s.Begin(Record{Start: time.Now(), Command: []string{fmt.Sprint(i)}})
			if err != nil {
				errs <- err
				return
			}
			if err := os.WriteFile(filepath.Join(repo, fmt.Sprintf("f%d", i)), []byte("x"), 0o644); err != nil {
				errs <- err
				return
			}
			errs <- ss.Finish(Record{End: time.Now(), Command: []string{fmt.Sprint(i)}})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	s, err := OpenExisting(state, repo)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := s.Sessions()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != n {
		t.Fatalf("%d sessions recorded, want %d", len(recs), n)
	}
	for _, r := range recs {
		if !r.Complete || r.EndCommit == "" {
			t.Errorf("incomplete: %+v", r)
		}
	}
}

func TestStaleIndexLockIgnored(t *testing.T) {
	repo := newRepo(t, map[string]string{"a": "a\n"})
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, nil)
	// A Git killed while writing the index leaves index.lock behind.
	write(t, filepath.Join(s.Dir, "index.lock"), "")
	record(t, s, Record{Start: time.Now()}, func() { write(t, filepath.Join(repo, "b"), "b\n") })
	recs, err := s.Sessions()
	if err != nil || len(recs) != 2 || recs[0].Files.Added != 1 {
		t.Fatalf("%v %+v", err, recs)
	}
}

func TestUnreadableFileNoted(t *testing.T) {
	if !testenv.AsTestUser(t) { // root would read what the test makes unreadable
		return
	}
	repo := newRepo(t, map[string]string{"a": "a\n"})
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, func() {
		write(t, filepath.Join(repo, "locked"), "secret\n")
		write(t, filepath.Join(repo, "visible"), "v\n")
		if err := os.Chmod(filepath.Join(repo, "locked"), 0); err != nil {
			t.Fatal(err)
		}
	})
	rec := onlySession(t, s)
	if rec.Files.Added != 1 || !strings.Contains(strings.Join(rec.Notes, "\n"), "locked") {
		t.Errorf("%+v", rec)
	}
}

func TestDirName(t *testing.T) {
	a, b := Dir("/s", "/home/u/src/proj"), Dir("/s", "/home/u/other/proj")
	if a == b || !strings.HasPrefix(a, "/s/shadow/proj-") || !strings.HasSuffix(a, ".git") {
		t.Errorf("Dir: %s %s", a, b)
	}
	if got := Dir("/s", "/x/..evil name\n"); !strings.HasPrefix(got, "/s/shadow/evil_name_-") {
		t.Errorf("Dir of a hostile name: %q", got)
	}
}

func TestResults(t *testing.T) {
	state := filepath.Join(t.TempDir(), "agentbox")
	if res, err := Results(state); err != nil || len(res) != 0 {
		t.Fatalf("no results yet: %v %v", res, err)
	}
	doc := []byte(`{"summary": "native 4.1ms, bwrap 9.0ms", "runs": [1, 2]}`)
	id1, err := StoreResult(state, "bench", doc)
	if err != nil {
		t.Fatal(err)
	}
	id2, err := StoreResult(state, "kmatrix", []byte(`{"kernels": 3}`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Results(state)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].ID != id2 && res[1].ID != id2 {
		t.Fatalf("results %+v", res)
	}
	r, err := FindResult(state, id1)
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != "bench" || r.Summary != "native 4.1ms, bwrap 9.0ms" || r.Size != len(doc) {
		t.Errorf("result %+v", r)
	}
	var out bytes.Buffer
	if err := WriteResult(&out, state, r); err != nil || !bytes.Equal(out.Bytes(), doc) {
		t.Errorf("stored document %q, %v", out.String(), err)
	}
	if _, err := StoreResult(state, "Bench/../x", doc); err == nil {
		t.Error("a kind with a slash: no error")
	}
	if _, err := StoreResult(state, "bench", []byte("{not json")); err == nil {
		t.Error("invalid JSON: no error")
	}
	if _, err := FindResult(state, "19990101"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown result: %v", err)
	}
}

// TestBackdatedChangeRecorded: a change hidden behind a restored mtime (same size) is
// still seen; the stat cache compares the ctime, which the sandbox cannot set. Git
// compares ctimes to the second, so the file's last change before the session must lie
// in an earlier second than the change during it (a change to the file's metadata in
// the very second of launch is the one case the stat cache can miss).
func TestBackdatedChangeRecorded(t *testing.T) {
	repo := newRepo(t, map[string]string{"a": "aaaa\n"})
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	path := filepath.Join(repo, "a")
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, nil)
	time.Sleep(1100 * time.Millisecond) // the change's ctime falls in a later second
	record(t, s, Record{Start: time.Now()}, func() {
		write(t, path, "bbbb\n")
		if err := os.Chtimes(path, old, old); err != nil {
			t.Fatal(err)
		}
	})
	recs, err := s.Sessions()
	if err != nil || len(recs) != 2 {
		t.Fatalf("%v %+v", err, recs)
	}
	if recs[0].Files.Changed != 1 {
		t.Errorf("a same-size change with its mtime restored was not recorded: %+v", recs[0].Files)
	}
}

func TestCompactKeepsSessions(t *testing.T) {
	repo := newRepo(t, map[string]string{"a": "a\n"})
	s, state := openStore(t, repo)
	id := record(t, s, Record{Start: time.Now()}, func() { write(t, filepath.Join(repo, "b"), "b\n") })
	if _, err := StoreResult(state, "bench", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := Compact(state); err != nil {
		t.Fatal(err)
	}
	if loose := shadowGit(t, s, "count-objects"); !strings.HasPrefix(loose, "0 objects") {
		t.Errorf("after Compact: %s", loose)
	}
	_, rec, err := Find(state, id)
	if err != nil {
		t.Fatal(err)
	}
	var diff bytes.Buffer
	if err := s.Diff(&diff, rec, false); err != nil || !strings.Contains(diff.String(), "+b") {
		t.Errorf("diff after Compact: %v %s", err, diff.String())
	}
	if res, err := Results(state); err != nil || len(res) != 1 {
		t.Errorf("results after Compact: %v %v", res, err)
	}
}

// TestNestedRepositoryNoted: a repository nested in the recorded one is recorded as
// its commit (a gitlink), and the record says so; one without a commit is named too.
func TestNestedRepositoryNoted(t *testing.T) {
	repo := newRepo(t, map[string]string{"a": "a\n"})
	s, _ := openStore(t, repo)
	record(t, s, Record{Start: time.Now()}, func() {
		home := t.TempDir()
		hostGit(t, home, repo, "init", "-q", "tools")
		write(t, filepath.Join(repo, "tools", "payload"), "hidden?\n")
		hostGit(t, home, filepath.Join(repo, "tools"), "add", "payload")
		hostGit(t, home, filepath.Join(repo, "tools"), "commit", "-q", "-m", "x")
		hostGit(t, home, repo, "init", "-q", "empty")
		write(t, filepath.Join(repo, "empty", "f"), "e\n")
	})
	rec := onlySession(t, s)
	notes := strings.Join(rec.Notes, "\n")
	for _, want := range []string{`nested repository "tools": recorded as its commit`, "'empty/' does not have a commit checked out"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	if rec.Files.Added != 1 {
		t.Errorf("files %+v", rec.Files)
	}
}
