package ucounts

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/mounts"
)

func TestShare(t *testing.T) {
	for host, want := range map[int64]int64{0: 0, -1: 0, 1: 1, 3: 1, 4: 1, 128: 32, 1<<31 - 1: (1<<31 - 1) / 4} {
		if got := Share(host); got != want {
			t.Errorf("Share(%d) = %d, want %d", host, got, want)
		}
	}
}

// TestMemlockShare: a session's RLIMIT_MEMLOCK is a quarter of the launcher's, but
// at least the 64 KiB gpg locks where that leaves the user's host programs half:
// with 128 KiB the quarter was 32 KiB, and gpg warned "using insecure memory".
func TestMemlockShare(t *testing.T) {
	for host, want := range map[int64]int64{0: 0, 1: 1, 16 << 10: 8 << 10, 64 << 10: 32 << 10,
		128 << 10: 64 << 10, 200 << 10: 64 << 10, 256 << 10: 64 << 10, 8 << 20: 2 << 20} {
		if got := MemlockShare(host); got != want {
			t.Errorf("MemlockShare(%d) = %d, want %d", host, got, want)
		}
		if got := MemlockShare(host); host > 0 && (got > max(host/2, 1) || got < Share(host)) {
			t.Errorf("MemlockShare(%d) = %d: more than half, or less than a quarter", host, got)
		}
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
		t.Fatal(err)
	}
	lower := lim
	lower.Cur = min(lim.Max, 128<<10)
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &lower); err != nil {
		t.Fatal(err)
	}
	defer unix.Setrlimit(unix.RLIMIT_MEMLOCK, &lim)
	got, err := rlimitShares(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if rlimitsPerNamespace(release()) {
		if i := slices.IndexFunc(got, func(l mounts.UserLimit) bool { return l.Name == "rlimit_memlock" }); i < 0 || got[i].Max != MemlockShare(int64(lower.Cur)) {
			t.Errorf("with a soft RLIMIT_MEMLOCK of %d: %v, want rlimit_memlock %d", lower.Cur, got, MemlockShare(int64(lower.Cur)))
		}
	}
}

// TestLimits: every limit of this process's namespace is in the list, a quarter of
// the lower of it and the host-wide value, and each passes the executors' check.
func TestLimits(t *testing.T) {
	got, err := Limits()
	if err != nil {
		t.Fatal(err)
	}
	names, _ := filepath.Glob("/proc/sys/user/max_*")
	var files, rl []mounts.UserLimit
	for _, l := range got {
		if l.IsRLimit() {
			rl = append(rl, l)
		} else {
			files = append(files, l)
		}
	}
	if len(files) != len(names) || len(files) == 0 {
		t.Fatalf("%d limits for %d files: %v", len(files), len(names), got)
	}
	checkRLimits(t, rl)
	read := func(p string) int64 {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	threads := read("/proc/sys/kernel/threads-max")
	for _, l := range files {
		host := read("/proc/sys/user/" + l.Name)
		if w, ok := hostWideFile(l.Name); ok && fileExists("/proc/sys/"+w) {
			w = "/proc/sys/" + w
			host = min(host, read(w))
		} else if strings.HasSuffix(l.Name, "_namespaces") {
			host = min(host, threads/2)
		}
		if l.Max != Share(host) || l.Check() != nil {
			t.Errorf("%s = %d; host %d, share %d, check %v", l.Name, l.Max, host, Share(host), l.Check())
		}
	}
}

// TestCheck: a plan names only a file of /proc/sys/user's limits, with a value the
// kernel takes.
func TestCheck(t *testing.T) {
	for _, l := range []mounts.UserLimit{{Name: "max_", Max: 1}, {Name: "../max_x", Max: 1}, {Name: "max_x/../y", Max: 1}, {Name: "max_X", Max: 1}, {Name: "user_ns", Max: 1}, {Name: "max_x", Max: -1}, {Name: "max_x", Max: 1 << 31}, {Name: "rlimit_nofile", Max: 1}, {Name: "rlimit_nproc", Max: -1}} {
		if l.Check() == nil {
			t.Errorf("%+v passed", l)
		}
	}
	if err := (mounts.UserLimit{Name: "max_inotify_instances", Max: 32}).Check(); err != nil {
		t.Error(err)
	}
}

// checkRLimits: every finite resource limit counted per user is in the list, a
// quarter of this process's soft limit; RLIMIT_NPROC, finite or not, at most a
// quarter of the machine's task pool.
func checkRLimits(t *testing.T, got []mounts.UserLimit) {
	t.Helper()
	if !rlimitsPerNamespace(release()) {
		if len(got) != 0 {
			t.Errorf("resource limits %v on a kernel that counts them per user for the whole host", got)
		}
		return
	}
	pool := min(readProcInt(t, "/proc/sys/kernel/pid_max"), readProcInt(t, "/proc/sys/kernel/threads-max"))
	want := 0
	for _, name := range mounts.RLimitNames {
		var lim unix.Rlimit
		r, _ := rlimitResource(name)
		if err := unix.Getrlimit(r, &lim); err != nil {
			t.Fatal(err)
		}
		share := Share(int64(lim.Cur))
		switch {
		case r == unix.RLIMIT_NPROC && lim.Cur == unix.RLIM_INFINITY:
			share = Share(pool)
		case r == unix.RLIMIT_NPROC:
			share = min(share, Share(pool))
		case lim.Cur == unix.RLIM_INFINITY:
			continue
		case r == unix.RLIMIT_MEMLOCK:
			share = MemlockShare(int64(lim.Cur))
		}
		want++
		i := slices.IndexFunc(got, func(l mounts.UserLimit) bool { return l.Name == name })
		if i < 0 || got[i].Max != share {
			t.Errorf("%s: %v; want %d (soft limit %d, task pool %d)", name, got, share, lim.Cur, pool)
		}
	}
	if len(got) != want {
		t.Errorf("resource limits %v; want %d", got, want)
	}
}

func readProcInt(t *testing.T, p string) int64 {
	t.Helper()
	v, err := readInt(p)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestNprocShareOfTheTaskPool: RLIMIT_NPROC's share is at most a quarter of the
// machine's task pool, also where the launcher's limit is unlimited.
func TestNprocShareOfTheTaskPool(t *testing.T) {
	for _, c := range []struct {
		soft  uint64
		tasks int64
		want  int64
	}{
		{unix.RLIM_INFINITY, 32768, 8192},
		{1 << 63, 32768, 8192},
		{96367, 32768, 8192},
		{96367, 4194304, 24091},
		{96367, 127000, 24091},
		{8, 32768, 2},
		{0, 32768, 0},
	} {
		if got := nprocShare(c.soft, c.tasks); got != c.want {
			t.Errorf("nprocShare(%d, %d) = %d; want %d", c.soft, c.tasks, got, c.want)
		}
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func TestRLimitsPerNamespace(t *testing.T) {
	for release, want := range map[string]bool{"5.10.0-32-amd64": false, "5.13.19": false, "5.14.0-427.el9.x86_64": true,
		"6.1.0": true, "7.2.13+deb14-amd64": true, "4.18.0": false, "": false, "x": false,
		"5.14": true, "5.1": false, "10.0.1": true, "6": false, "6.": false, ".14": false, "5.x": false, "5.15-rc1": true, "99999999999.1": false} {
		if got := rlimitsPerNamespace(release); got != want {
			t.Errorf("rlimitsPerNamespace(%q) = %v", release, got)
		}
	}
}

// TestReadIntAt: the number a file holds, as os.ReadFile and ParseInt read it
// (surrounding whitespace dropped); a missing file is fs.ErrNotExist (the host-wide
// files may be absent), and a file past the buffer or not a number fails instead
// of giving a prefix.
func TestReadIntAt(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"ok": " 524288\n", "neg": "-1\n", "long": strings.Repeat("1", 64), "text": "12 13\n", "empty": ""} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := readInt(filepath.Join(dir, "ok")); v != 524288 || err != nil {
		t.Errorf("ok: %d, %v", v, err)
	}
	if v, err := readInt(filepath.Join(dir, "neg")); v != -1 || err != nil {
		t.Errorf("neg: %d, %v", v, err)
	}
	for _, name := range []string{"long", "text", "empty"} {
		if v, err := readInt(filepath.Join(dir, name)); err == nil {
			t.Errorf("%s: %d, want an error", name, v)
		}
	}
	if _, err := readInt(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: %v, want fs.ErrNotExist", err)
	}
}

// TestLimitsAllocations: reading the limits allocates the limit names and the
// list, not a listing buffer, a path per file or the files' contents: each
// allocation is fresh memory on the launcher's critical path.
func TestLimitsAllocations(t *testing.T) {
	if testenv.RaceBuild {
		t.Skip("the race detector allocates beside what it instruments: the count is the plain build's")
	}
	got, err := limits()
	if err != nil {
		t.Fatal(err)
	}
	n := testing.AllocsPerRun(20, func() {
		if _, err := limits(); err != nil {
			t.Fatal(err)
		}
	})
	// Per limit of /proc/sys/user its name; the two lists grown by appending.
	if bound := float64(len(got) + 12); n > bound {
		t.Errorf("%v allocations for %d limits, want at most %v", n, len(got), bound)
	}
}
