package snapshot_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/gitguard/snapshot"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// These tests run the real agentbox binary as the unprivileged test user: the
// snapshot is written before the sandbox starts, by the launching user, with that
// user's permissions.

// snapEnv is one repository of the test user, below a parent directory.
type snapEnv struct {
	t      *testing.T
	home   string
	parent string
	repo   string
}

// newSnapEnv makes home/, and a repository parent/proj with one commit. When
// parentWritable is false, parent belongs to root (mode 0755) or, when the tests do
// not run as root, is made read-only, so the test user cannot create files in it.
func newSnapEnv(t *testing.T, parentWritable bool) *snapEnv {
	t.Helper()
	base := testenv.Dir(t, "snap")
	e := &snapEnv{t: t, home: filepath.Join(base, "home"), parent: filepath.Join(base, "parent")}
	e.repo = filepath.Join(e.parent, "proj")
	for _, d := range []string{e.home, e.repo} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Chown(t, base)
	testenv.Git(t, e.home, e.repo, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(e.repo, "README"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.Chown(t, e.repo)
	testenv.Git(t, e.home, e.repo, "add", "README")
	testenv.Git(t, e.home, e.repo, "commit", "-q", "-m", "first")
	if !parentWritable {
		if testenv.TestUser(t).Root {
			os.Lchown(e.parent, 0, 0)
		} else {
			os.Chmod(e.parent, 0o555)
			t.Cleanup(func() { os.Chmod(e.parent, 0o755) })
		}
	}
	return e
}

type snapRun struct {
	code           int
	stdout, stderr string
}

// agentbox runs the binary as the test user in the repository.
func (e *snapEnv) agentbox(args ...string) snapRun {
	e.t.Helper()
	cmd := testenv.Command(e.t, e.home, testenv.Binary(e.t), args...)
	cmd.Dir = e.repo
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := snapRun{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("run agentbox: %v", err)
	}
	return r
}

// store is the default snapshot store of the test user.
func (e *snapEnv) store() string { return filepath.Join(e.home, ".local/state/agentbox/snapshots") }

// snapshots lists the snapshot records of proj in the store at dir.
func (e *snapEnv) snapshots(dir string) []string {
	m, _ := filepath.Glob(filepath.Join(dir, "proj-*", "snaps", "*"+snapshot.RecordSuffix))
	return m
}

func TestExecWritesSnapshot(t *testing.T) {
	e := newSnapEnv(t, false)
	r := e.agentbox("exec", "--no-record", "--", "true")
	if r.code != 0 {
		t.Fatalf("agentbox exec: status %d\n%s", r.code, r.stderr)
	}
	snaps := e.snapshots(e.store())
	if len(snaps) != 1 {
		t.Fatalf("snapshots in %s: %v, want one", e.store(), snaps)
	}
	if ents, _ := os.ReadDir(e.parent); len(ents) != 1 {
		t.Errorf("%s holds %d entries, want only proj: snapshots do not go next to the repository", e.parent, len(ents))
	}
	fi, err := os.Stat(snaps[0])
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != 0o600 {
		t.Errorf("%s: mode %v, want -rw-------", snaps[0], fi.Mode())
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != testenv.TestUser(t).UID {
		t.Errorf("%s: owner %d, want the launching user %d", snaps[0], uid, testenv.TestUser(t).UID)
	}
	if fi, err := os.Stat(filepath.Dir(filepath.Dir(snaps[0]))); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the repository's store: %v, %v; want mode 0700", fi, err)
	}

	// agentbox restore checks and restores it; Git reads the result.
	if r := e.agentbox("restore", "--check", snaps[0]); r.code != 0 || !strings.Contains(r.stdout, "intact") {
		t.Errorf("agentbox restore --check: status %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	dir := filepath.Join(e.home, "restored")
	r = e.agentbox("restore", snaps[0], "--into", dir)
	if r.code != 0 || !strings.Contains(r.stdout, dir) {
		t.Fatalf("agentbox restore: status %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	head := testenv.Git(t, e.home, e.repo, "rev-parse", "HEAD")
	if got := testenv.Git(t, e.home, dir, "rev-parse", "HEAD"); got != head {
		t.Errorf("restored HEAD %s, want %s", got, head)
	}
	// A second restore to the same place is refused, and changes nothing.
	r = e.agentbox("restore", snaps[0], "--into", dir)
	if r.code != 125 || !strings.Contains(r.stderr, "not empty") {
		t.Errorf("second restore: status %d, stderr %q; want 125 and a refusal", r.code, r.stderr)
	}
}

// TestExecUnchangedSnapshotsWriteNothing: sessions that change nothing in .git add
// nothing to the store: each names the record of the first again.
func TestExecUnchangedSnapshotsWriteNothing(t *testing.T) {
	e := newSnapEnv(t, true)
	blob := make([]byte, 2<<20)
	rand.Read(blob)
	if err := os.WriteFile(filepath.Join(e.repo, ".git/objects/pack/pack-big.pack"), blob, 0o444); err != nil {
		t.Fatal(err)
	}
	testenv.Chown(t, e.repo)
	time.Sleep(1100 * time.Millisecond) // past the stat cache's racy window
	if r := e.agentbox("exec", "--no-record", "--", "true"); r.code != 0 {
		t.Fatalf("status %d\n%s", r.code, r.stderr)
	}
	before := diskBlocks(e.store())
	for range 5 {
		if r := e.agentbox("exec", "--no-record", "--", "true"); r.code != 0 {
			t.Fatalf("status %d\n%s", r.code, r.stderr)
		}
	}
	if grew := diskBlocks(e.store()) - before; grew != 0 {
		t.Errorf("five unchanged sessions added %d bytes to the store, want none", grew)
	}
	if n := len(e.snapshots(e.store())); n != 1 {
		t.Errorf("%d snapshots, want 1", n)
	}
}

func diskBlocks(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil {
			n += fi.Sys().(*syscall.Stat_t).Blocks * 512
		}
		return nil
	})
	return n
}

func TestExecNoGitSave(t *testing.T) {
	e := newSnapEnv(t, true)
	for _, flag := range []string{"--no-git-save", "--git-save-disabled"} {
		if r := e.agentbox("exec", "--no-record", flag, "--", "true"); r.code != 0 {
			t.Fatalf("agentbox exec %s: status %d\n%s", flag, r.code, r.stderr)
		}
	}
	if _, err := os.Lstat(e.store()); err == nil {
		t.Errorf("snapshot store %s created despite --no-git-save", e.store())
	}
}

func TestExecGitSaveDirAndKeep(t *testing.T) {
	e := newSnapEnv(t, true)
	saves := filepath.Join(e.home, "saves") // created by agentbox
	for range 3 {
		if r := e.agentbox("exec", "--no-record", "--git-save-dir", saves, "--git-save-keep", "2", "--", "true"); r.code != 0 {
			t.Fatalf("agentbox exec: status %d\n%s", r.code, r.stderr)
		}
	}
	if s := e.snapshots(saves); len(s) != 2 {
		t.Errorf("snapshots in %s: %v, want the newest 2", saves, s)
	}
	if _, err := os.Lstat(e.store()); err == nil {
		t.Errorf("snapshot store %s created despite --git-save-dir", e.store())
	}
	if fi, err := os.Stat(saves); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("%s: %v, %v; want a directory of mode 0700", saves, fi, err)
	}
	for _, bad := range []string{"lots", "-1"} {
		r := e.agentbox("exec", "--no-record", "--git-save-keep-size", bad, "--", "true")
		if msg := strings.TrimSpace(r.stderr); r.code != 125 || strings.Count(msg, "\n") != 0 || !strings.Contains(msg, "--git-save-keep-size") {
			t.Errorf("--git-save-keep-size %s: status %d, message %q; want 125 and one line", bad, r.code, msg)
		}
	}
}

// TestExecSnapshotFailureStopsLaunch: when the snapshot cannot be written the command
// does not run, agentbox exits 125 with one line naming the path and the flag that
// skips the snapshot, and nothing is left in the store's directory.
func TestExecSnapshotFailureStopsLaunch(t *testing.T) {
	e := newSnapEnv(t, false)
	ran := filepath.Join(e.repo, "ran")
	r := e.agentbox("exec", "--no-record", "--git-save-dir", e.parent, "--", "touch", ran)
	if r.code != 125 {
		t.Fatalf("status %d, want 125\n%s", r.code, r.stderr)
	}
	msg := strings.TrimSpace(r.stderr)
	if strings.Count(msg, "\n") != 0 || !strings.Contains(msg, e.parent) || !strings.Contains(msg, "--no-git-save") {
		t.Errorf("message %q: want one line naming %s and --no-git-save", msg, e.parent)
	}
	if _, err := os.Lstat(ran); err == nil {
		t.Error("the command ran although the snapshot failed")
	}
	if ents, _ := os.ReadDir(e.parent); len(ents) != 1 {
		t.Errorf("%s holds %d entries, want only proj", e.parent, len(ents))
	}

	// --no-git-save launches all the same.
	if r := e.agentbox("exec", "--no-record", "--no-git-save", "--git-save-dir", e.parent, "--", "touch", ran); r.code != 0 {
		t.Fatalf("with --no-git-save: status %d\n%s", r.code, r.stderr)
	}
	if _, err := os.Lstat(ran); err != nil {
		t.Errorf("the command did not run with --no-git-save: %v", err)
	}
}

// TestExecSnapshotUnreadableObject: an object the user cannot read stops the launch,
// and the failed save leaves no record.
func TestExecSnapshotUnreadableObject(t *testing.T) {
	e := newSnapEnv(t, true)
	objs, _ := filepath.Glob(filepath.Join(e.repo, ".git/objects/??/*"))
	if len(objs) == 0 {
		t.Fatal("fixture: no loose objects")
	}
	if err := os.Chmod(objs[0], 0); err != nil {
		t.Fatal(err)
	}
	r := e.agentbox("exec", "--no-record", "--", "true")
	if r.code != 125 || !strings.Contains(r.stderr, objs[0]) || !strings.Contains(r.stderr, "--no-git-save") {
		t.Errorf("status %d, stderr %q: want 125 naming %s and --no-git-save", r.code, r.stderr, objs[0])
	}
	if s := e.snapshots(e.store()); len(s) != 0 {
		t.Errorf("partial snapshot left: %v", s)
	}
}

// TestExecSnapshotBounded: a session plants a 1 TiB sparse file in .git; the next
// launch must not spend hours reading its holes: the file costs what it costs on disk
// (nothing), is skipped and named on one warning line, and the launch goes on. So
// does a real file beyond --git-save-max-size: left out and named, every launch.
func TestExecSnapshotBounded(t *testing.T) {
	e := newSnapEnv(t, true)
	planted := filepath.Join(e.repo, ".git/objects/pack/pack-planted.pack")
	if r := e.agentbox("exec", "--no-record", "--no-git-save", "--", "truncate", "-s", "1T", planted); r.code != 0 {
		t.Fatalf("planting from the sandbox: status %d\n%s", r.code, r.stderr)
	}
	ran := filepath.Join(e.repo, "ran")
	r := e.agentbox("exec", "--no-record", "--", "touch", ran)
	if r.code != 0 || !strings.Contains(r.stderr, "skipped "+planted+": sparse file") {
		t.Errorf("status %d, stderr %q: want 0 and a warning naming %s", r.code, r.stderr, planted)
	}
	if _, err := os.Lstat(ran); err != nil {
		t.Error("the command did not run")
	}
	os.Remove(planted)

	big := filepath.Join(e.repo, ".git/objects/pack/pack-big.pack")
	if r := e.agentbox("exec", "--no-record", "--no-git-save", "--", "sh", "-c", "head -c 3M /dev/urandom > "+big); r.code != 0 {
		t.Fatalf("planting from the sandbox: status %d\n%s", r.code, r.stderr)
	}
	// A real file beyond --git-save-max-size is left out of the snapshot and named;
	// the launch goes on, and so do the next ones: a session cannot stop them.
	for i := 0; i < 2; i++ {
		os.Remove(ran)
		r = e.agentbox("exec", "--no-record", "--git-save-max-size", "1M", "--", "touch", ran)
		if r.code != 0 || !strings.Contains(r.stderr, "skipped "+big+": ") || !strings.Contains(r.stderr, "--git-save-max-size") {
			t.Errorf("launch %d: status %d, stderr %q: want 0 and a warning naming %s and --git-save-max-size", i, r.code, r.stderr, big)
		}
		if _, err := os.Lstat(ran); err != nil {
			t.Errorf("launch %d: the command did not run", i)
		}
	}
	r = e.agentbox("exec", "--no-record", "--git-save-max-size", "lots", "--", "true")
	if msg := strings.TrimSpace(r.stderr); r.code != 125 || strings.Count(msg, "\n") != 0 || !strings.Contains(msg, "--git-save-max-size") {
		t.Errorf("bad --git-save-max-size: status %d, message %q; want 125 and one line", r.code, msg)
	}
}

// TestExecNotAGitRepo: a plain directory launches without a snapshot.
func TestExecNotAGitRepo(t *testing.T) {
	e := newSnapEnv(t, true)
	plain := filepath.Join(e.parent, "plain")
	os.Mkdir(plain, 0o755)
	testenv.Chown(t, plain)
	if r := e.agentbox("exec", "--no-record", "--repo", plain, "--", "true"); r.code != 0 {
		t.Fatalf("status %d\n%s", r.code, r.stderr)
	}
	if m, _ := filepath.Glob(filepath.Join(e.store(), "plain-*")); len(m) != 0 {
		t.Errorf("snapshot of a non-Git directory: %v", m)
	}
}

// TestSnapshotManifestFromExec: the manifest agentbox exec writes is one that
// ReadManifest accepts, and it names the repository and the binary's version.
func TestSnapshotManifestFromExec(t *testing.T) {
	e := newSnapEnv(t, true)
	if r := e.agentbox("exec", "--no-record", "--", "true"); r.code != 0 {
		t.Fatalf("status %d\n%s", r.code, r.stderr)
	}
	into := filepath.Join(testenv.Dir(t, "restore"), "out")
	res, err := snapshot.RestoreStored(e.snapshots(e.store())[0], into)
	if err != nil {
		t.Fatal(err)
	}
	version := strings.Fields(e.agentbox("version").stdout)
	if res.Manifest.Repo != e.repo || len(version) < 2 || res.Manifest.AgentboxVersion != version[1] {
		t.Errorf("manifest %+v: want repo %s and version %v", res.Manifest, e.repo, version)
	}
}
