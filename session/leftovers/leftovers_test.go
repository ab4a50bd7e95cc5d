package leftovers

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

func mkdirs(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
}

func TestGCOwnership(t *testing.T) {
	cache := t.TempDir()
	tmp := filepath.Join(cache, "tmp")
	guards := t.TempDir()
	// 8388608 is above the kernel's largest pid_max (2^22): no process has it.
	var (
		held      = filepath.Join(tmp, "1-20260101-000000-held")      // live launcher (lock held)
		reused    = filepath.Join(tmp, "1-20260101-000000-reused")    // PID 1 alive, lock free: PID reused
		unclaimed = filepath.Join(tmp, "1-20260101-000000-unclaimed") // no lock, PID alive: keep
		dead      = filepath.Join(tmp, "8388608-20260101-000000-dead")
		guardDead = filepath.Join(guards, "agentbox-guard-8388608-123")
		guardLive = filepath.Join(guards, "agentbox-guard-1-456")
		ckptDead  = filepath.Join(guards, CheckpointPrefix+"8388608-789")
		other     = filepath.Join(guards, "unrelated-8388608-1")
		orphan    = filepath.Join(tmp, "8388608-20260101-000000-gone.lock")
	)
	mkdirs(t, held, reused, unclaimed, dead, guardDead, guardLive, ckptDead, other)
	lock, err := Claim(held)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	if err := os.WriteFile(reused+lockSuffix, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(orphan, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	// A dry run decides the same but removes nothing.
	found, err := GC(GCOptions{CacheDir: cache, GuardDir: guards, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 7 {
		t.Fatalf("dry run found %d: %+v", len(found), found)
	}
	for _, d := range []string{held, reused, unclaimed, dead, guardDead, guardLive, orphan} {
		if _, err := os.Lstat(d); err != nil {
			t.Fatalf("dry run removed %s", d)
		}
	}

	found, err = GC(GCOptions{CacheDir: cache, GuardDir: guards})
	if err != nil {
		t.Fatal(err)
	}
	state := map[string]Leftover{}
	for _, l := range found {
		state[l.Path] = l
	}
	for _, c := range []struct {
		path    string
		removed bool
	}{{held, false}, {reused, true}, {unclaimed, false}, {dead, true}, {guardDead, true}, {guardLive, false}, {ckptDead, true}} {
		l, ok := state[c.path]
		if !ok {
			t.Errorf("%s not considered", c.path)
			continue
		}
		_, err := os.Lstat(c.path)
		if exists := err == nil; exists == c.removed || l.Removed != c.removed || l.Live == c.removed {
			t.Errorf("%s: exists %v, reported %+v; want removed=%v", c.path, exists, l, c.removed)
		}
	}
	for _, p := range []string{reused + lockSuffix, orphan} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("stale lock file %s left", p)
		}
	}
	if _, err := os.Lstat(held + lockSuffix); err != nil {
		t.Errorf("live lock file removed: %v", err)
	}
	if _, err := os.Lstat(other); err != nil {
		t.Error("gc removed a directory that is not agentbox's")
	}
}

func TestClaimRelease(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "9-x")
	mkdirs(t, dir)
	lock, err := Claim(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, taken := TakeLock(dir + lockSuffix); taken {
		t.Fatal("a claimed lock could be taken")
	}
	if _, err := Claim(dir); err == nil {
		t.Fatal("a directory was claimed twice")
	}
	lock.Release()
	if _, err := os.Lstat(dir + lockSuffix); err == nil {
		t.Fatal("release left the lock file")
	}
}

// TestClaimSquatted: another user who puts something at DIR.lock first (in a shared
// /tmp, between the directory's creation and its claim) does not stop the claim,
// and gc then goes by the launcher's PID: a live one's directory is kept, a dead
// one's removed, and the squatter's file is never taken for a claim.
func TestClaimSquatted(t *testing.T) {
	guards := t.TempDir()
	live := filepath.Join(guards, CheckpointPrefix+"1-1")
	dead := filepath.Join(guards, CheckpointPrefix+"8388608-2")
	mine := filepath.Join(guards, CheckpointPrefix+strconv.Itoa(os.Getpid())+"-3")
	mkdirs(t, live, dead, mine)
	squat := func(dir string) {
		if err := unix.Mkfifo(dir+lockSuffix, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	squat(mine)
	lock, err := Claim(mine)
	if err != nil {
		t.Fatalf("a squatted lock name stopped the claim: %v", err)
	}
	defer lock.Release()
	squat(live)
	squat(dead)
	deads := []string{dead}
	if os.Getuid() == 0 {
		// A regular file of another user's, as well as a FIFO of anyone's.
		other := filepath.Join(guards, CheckpointPrefix+"8388608-4")
		mkdirs(t, other)
		if err := os.WriteFile(other+lockSuffix, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(other+lockSuffix, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		deads = append(deads, other)
	}
	found, err := GC(GCOptions{GuardDir: guards})
	if err != nil {
		t.Fatal(err)
	}
	removed := map[string]bool{}
	for _, l := range found {
		removed[l.Path] = l.Removed
	}
	if removed[live] || removed[mine] || !removed[deads[0]] || !removed[deads[len(deads)-1]] {
		t.Fatalf("gc with squatted lock files: %+v; want only %v removed", found, deads)
	}
}

// The --ssh-agent filter's directories are collected as the other leftovers are: a
// dead launcher's goes (by GC and by CollectSSHAgent), a claimed one stays.
func TestGCSSHAgentDirs(t *testing.T) {
	for _, viaLaunch := range []bool{false, true} {
		guards := t.TempDir()
		dead := filepath.Join(guards, SSHAgentPrefix+"8388608-1")
		live := filepath.Join(guards, SSHAgentPrefix+strconv.Itoa(os.Getpid())+"-2")
		mkdirs(t, dead, live)
		lock, err := Claim(live)
		if err != nil {
			t.Fatal(err)
		}
		if viaLaunch {
			CollectSSHAgent(guards)
		} else if found, err := GC(GCOptions{GuardDir: guards}); err != nil || len(found) != 2 {
			t.Fatalf("GC found %+v, %v", found, err)
		}
		if _, err := os.Lstat(dead); !os.IsNotExist(err) {
			t.Errorf("launch %v: the dead launcher's %s is still there: %v", viaLaunch, dead, err)
		}
		if _, err := os.Lstat(live); err != nil {
			t.Errorf("launch %v: the live launcher's %s was removed: %v", viaLaunch, live, err)
		}
		lock.Release()
	}
}

// A launch that opened a pending audit's journal just before its auditor removed it
// and let go must not take the lock of the removed file: the audit has run, and it
// would run it a second time, moving the next session's files aside under the dead
// session's name.
func TestLockOfARemovedFileIsNotTaken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	if err := os.WriteFile(path, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if l, none := lockOpened(f); l != nil || !none {
		t.Fatalf("lockOpened of a removed file = %v, %v; want no lock and nothing to wait for", l, none)
	}
	if err := os.WriteFile(path, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, ok := TakeLock(path)
	if l == nil || !ok {
		t.Fatalf("TakeLock of a linked file = %v, %v; want it locked", l, ok)
	}
	l.Close()
}
