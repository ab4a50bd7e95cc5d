package leafcg

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testenv"
)

// TestWritable: the sandbox's view of a cgroup file, by mode alone: owner bits for
// its uid, group bits for one of its groups, else the others' bits.
func TestWritable(t *testing.T) {
	for _, c := range []struct {
		uid, gid uint32
		mode     uint32
		want     bool
	}{
		{1000, 5, 0o644, true},
		{1000, 5, 0o444, false},
		{0, 1000, 0o664, true},
		{0, 1000, 0o644, false},
		{0, 0, 0o646, true},
		{0, 0, 0o644, false},
	} {
		st := unix.Stat_t{Uid: c.uid, Gid: c.gid, Mode: unix.S_IFREG | c.mode}
		if got := writable(st, 1000, []int{1000, 7}); got != c.want {
			t.Errorf("uid %d gid %d mode %o: %v, want %v", c.uid, c.gid, c.mode, got, c.want)
		}
	}
}

// TestLeaf makes a leaf below this process's cgroup (root may), moves a process into
// it and removes it again with the process still running: the process goes back to
// the parent and nothing is left.
func TestLeaf(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root: creates a cgroup below its own")
	}
	name := fmt.Sprintf("agentbox-leafcg-test-%d", os.Getpid())
	l, err := Prepare(name)
	if err != nil || l == nil {
		t.Fatalf("Prepare: %v, %v", l, err)
	}
	sleeper := exec.Command("sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	if err := l.Place(sleeper.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(l.Dir, "nested"), 0o755); err != nil {
		t.Fatal(err)
	}
	cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", sleeper.Process.Pid))
	if !strings.Contains(string(cg), "/"+name+"\n") {
		t.Fatalf("sleeper's cgroup: %s", cg)
	}
	if err := l.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(l.Dir); !os.IsNotExist(err) {
		t.Errorf("leaf still there: %v", err)
	}
	cg, _ = os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", sleeper.Process.Pid))
	if strings.Contains(string(cg), name) {
		t.Errorf("sleeper not moved back: %s", cg)
	}
}

// BenchmarkLeaf is the launcher's cost of a session's cgroup: make it, remove it.
func BenchmarkLeaf(b *testing.B) {
	if os.Geteuid() != 0 {
		testenv.Skip(b, "needs root: creates a cgroup below its own")
	}
	for i := 0; b.Loop(); i++ {
		l, err := Prepare(fmt.Sprintf("agentbox-leafcg-bench-%d-%d", os.Getpid(), i))
		if err != nil || l == nil {
			b.Fatalf("Prepare: %v, %v", l, err)
		}
		if err := l.Remove(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCgroup2Mounts: only cgroup2 lines, in order, with their octal escapes undone;
// a cgroup v1 or other mount whose point or options mention cgroup2 is no match.
func TestCgroup2Mounts(t *testing.T) {
	table := `21 26 0:20 / /proc rw,relatime - proc proc rw
30 22 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw
41 30 0:38 / /sys/fs/cgroup/cgroup2 rw - cgroup cgroup rw,cgroup2
42 26 0:37 /user.slice/a\040b /mnt/my\134cg\040x rw master:3 - cgroup2 none rw
43 26 0:37 / /bad\0`
	got := cgroup2Mounts([]byte(table))
	want := []mount{{"/", "/sys/fs/cgroup/unified"}, {`/user.slice/a b`, `/mnt/my\cg x`}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("cgroup2Mounts = %q, want %q", got, want)
	}
	if s := unescapeOctal(`a\04`); s != `a\04` {
		t.Errorf("a cut escape: %q", s)
	}
}
