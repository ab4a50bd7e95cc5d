package behaviour

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/policy"
)

// TestTmpBudget: --tmp-size (issue 33) on every backend and runner: /tmp, /run,
// /dev/shm and HOME's upper layer are directories of one tmpfs, so a write past the
// budget in /tmp gets ENOSPC and leaves no room in any of the others (one budget,
// not one each); each of them alone is bounded too. /dev is the budget's as well
// under native; bwrap's own /dev, which it cannot size, is read-only instead, while
// /dev/shm in it stays writable. The Go API's TmpSize is the same budget.
func TestTmpBudget(t *testing.T) {
	for _, backend := range runners(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			// Each big write is twice what the budget holds; once /tmp is full, a
			// small write elsewhere shows whether the two share it.
			out := b.ok(`fill() {
  if err=$(dd if=/dev/zero of="$1" bs=$2 count=$3 2>&1); then echo "$1 ok"
  else case $err in *"No space left on device"*) echo "$1 full";; *"Read-only file system"*) echo "$1 read-only";;
    *) echo "$1 other: $err" | tr '\n' ' '; echo;; esac; fi
}
fill /tmp/a 1M 16
for f in /dev/shm/small /run/small "$HOME/small"; do fill "$f" 64k 1; done
rm -f /tmp/a /dev/shm/small /run/small "$HOME/small"
fill /dev/shm/room 64k 1
for f in /dev/shm/b /run/c "$HOME/d"; do fill "$f" 1M 16; rm -f "$f"; done
fill /dev/e 1M 16`, "--tmp-size", "8M")
			want := []string{"/tmp/a full", "/dev/shm/small full", "/run/small full", b.home + "/small full",
				"/dev/shm/room ok", "/dev/shm/b full", "/run/c full", b.home + "/d full", "/dev/e full"}
			if backend == "bwrap" {
				want[len(want)-1] = "/dev/e read-only"
			}
			if got := strings.Split(strings.TrimSpace(out), "\n"); !slices.Equal(got, want) {
				t.Errorf("inside:\n%s\nwant:\n%s", out, strings.Join(want, "\n"))
			}
		})
	}
}

// TestTmpBudgetInodes: the budget bounds inodes too, one per 8 KiB of it (1024 for
// 8M, mounts.BudgetSplit), since empty files take kernel memory but no page.
func TestTmpBudgetInodes(t *testing.T) {
	for _, backend := range cliRunners(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			out := b.ok(`cd /tmp && seq -f f%g 3000 | xargs touch 2>&1 | grep -m1 -o 'No space left on device'; ls | grep -c '^f'`, "--tmp-size", "8M")
			n, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(out), "No space left on device\n"))
			_, inodes := mounts.BudgetSplit(8 << 20)
			if !strings.HasPrefix(out, "No space left on device\n") || err != nil || n < int(inodes)*9/10 || n > int(inodes) {
				t.Errorf("3000 empty files in an 8M budget: %q, want ENOSPC after at most %d", out, inodes)
			}
		})
	}
}

// TestTmpBudgetDefault: without --tmp-size the RAM-backed filesystems are bounded by
// the default (a quarter of RAM, at most 4G), not the kernel's half of RAM each:
// its data part (mounts.BudgetSplit).
func TestTmpBudgetDefault(t *testing.T) {
	want, _ := mounts.BudgetSplit(policy.DefaultTmpSize(policy.TotalRAM()))
	for _, backend := range cliRunners(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			// bwrap's own /dev is unsized, and read-only.
			paths := `/tmp /run /dev/shm "$HOME"`
			if backend != "bwrap" {
				paths += " /dev"
			}
			out := b.ok(`for p in ` + paths + `; do echo "$p $(stat -f -c '%b %S' "$p")"; done`)
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				f := strings.Fields(line)
				if len(f) != 3 {
					t.Fatalf("statfs inside: %q", out)
				}
				blocks, _ := strconv.ParseInt(f[1], 10, 64)
				bsize, _ := strconv.ParseInt(f[2], 10, 64)
				if blocks*bsize != want {
					t.Errorf("%s holds %d bytes, want the default budget %d", f[0], blocks*bsize, want)
				}
			}
		})
	}
}

// TestTmpBudgetDiskTmp: with --disk-tmp, /tmp is on disk, outside the budget; the
// rest stays bounded.
func TestTmpBudgetDiskTmp(t *testing.T) {
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			out := b.ok(`dd if=/dev/zero of=/tmp/a bs=1M count=16 2>/dev/null && echo "tmp ok"
dd if=/dev/zero of=/run/b bs=1M count=16 2>/dev/null || echo "run full"`, "--disk-tmp", "--tmp-size", "8M")
			if out != "tmp ok\nrun full\n" {
				t.Errorf("inside: %q", out)
			}
		})
	}
}

// TestTmpBudgetRepoFile: a repository's .agentbox.toml may lower tmp-size, never
// raise it.
func TestTmpBudgetRepoFile(t *testing.T) {
	b := newBox(t, "native")
	writeFile(t, b.repo+"/.agentbox.toml", "tmp-size = \"4M\"\n")
	data, _ := mounts.BudgetSplit(4 << 20)
	if out := b.ok(`stat -f -c '%b %S' /tmp`, "--tmp-size", "8M"); out != fmt.Sprintf("%d 4096\n", data/4096) {
		t.Errorf("lowered by the repository's file: /tmp is %q", out)
	}
	writeFile(t, b.repo+"/.agentbox.toml", "tmp-size = \"16M\"\n")
	r := b.fixture().Sh(`echo RAN`, "--tmp-size", "8M")
	if r.Code != 125 || strings.Contains(r.Stdout, "RAN") || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 ||
		!strings.Contains(r.Stderr, "may only lower it") {
		t.Errorf("raised by the repository's file: %s", r)
	}
}

// TestTmpBudgetMountTable: on every backend and runner the sandbox's mount table
// shows each directory of the budget at its own destination only, and the budget's
// root nowhere. A tool that finds a file's other places through the mount table
// (Codex's nested sandbox does, for its socket directory in /tmp) would otherwise
// find it at a path the sandbox does not have and fail; bwrap's stage's own mounts
// (compat.StageDir) must not show either, nor native's scratch place of the root.
func TestTmpBudgetMountTable(t *testing.T) {
	for _, backend := range runners(t) {
		t.Run(backend, func(t *testing.T) { budgetMountTable(t, backend) })
	}
}

func budgetMountTable(t *testing.T, backend string) {
	b := newBox(t, backend)
	out := b.ok(`cat /proc/self/mountinfo`, "--tmp-size", "8M")
	type mount struct{ dev, root, point string }
	var all []mount
	var tmp mount
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			t.Fatalf("mountinfo line %q", line)
		}
		m := mount{f[2], f[3], f[4]}
		all = append(all, m)
		if m.point == "/tmp" {
			tmp = m
		}
	}
	if tmp.dev == "" || tmp.root == "/" {
		t.Fatalf("/tmp is no directory of a budget:\n%s", out)
	}
	places := map[string][]string{}
	for _, m := range all {
		if m.dev != tmp.dev {
			continue
		}
		if m.root == "/" {
			t.Errorf("the budget's root is mounted at %s:\n%s", m.point, out)
		}
		places[m.root] = append(places[m.root], m.point)
	}
	for root, points := range places {
		if len(points) != 1 {
			t.Errorf("budget directory %s mounted at %q, want one place", root, points)
		}
	}
	wants := []string{"/tmp", "/run", "/dev/shm"}
	if backend != "bwrap" {
		wants = append(wants, "/dev") // bwrap's own /dev is no directory of the budget
	}
	for _, want := range wants {
		found := false
		for _, points := range places {
			found = found || slices.Contains(points, want)
		}
		if !found {
			t.Errorf("%s is not a directory of the budget:\n%s", want, out)
		}
	}
}

// TestTmpBudgetKernelMemory: the budget holds what a filled tmpfs takes of the
// host's memory, its inodes' kernel memory included, not only the data: with
// --tmp-size 128M a session that fills the budget with empty files of 255-byte
// names (or, Linux 6.6+, one file's extended attributes) and then data takes at
// most 128 MiB more than the same tools writing nowhere, measured as the session's
// memory cgroup's charge (data, inodes, dentries, names, attributes) where the test
// runs as root, else as the growth of the machine's Shmem and Slab during the
// script (the kernel matrix's VMs, where nothing else runs). Before mounts.BudgetSplit the inodes came on top: 172-184 MiB.
func TestTmpBudgetKernelMemory(t *testing.T) {
	const budget, slack = 128 << 20, 4 << 20
	// $D is where the script writes; /proc for the baseline, where nothing can be.
	// The data file is made first: a full inode table leaves no room for it.
	// Perl, which the kernel matrix's images have (no Python, no seq): xattrs by
	// setxattr(2)'s number (amd64 188, arm64 5).
	fills := []struct{ name, script string }{
		{"long names", `touch "$D/data" 2>/dev/null
perl -e 'for my $i (0..40000) { open(my $f, ">", sprintf("%s/%08d%s", $ARGV[0], $i, "x" x 247)) or last }' "$D"
dd if=/dev/zero of="$D/data" bs=1M count=256 2>/dev/null
sleep 0.5`},
		{"extended attributes", `touch "$D/data" "$D/x" 2>/dev/null
perl -e 'my $nr = $ARGV[1] eq "aarch64" ? 5 : 188; my $v = "";
for my $i (0..10_000_000) { my $n = sprintf("user.%08d", $i); last if syscall($nr, "$ARGV[0]/x", $n, $v, 0, 0) != 0 }' "$D" "$(uname -m)"
dd if=/dev/zero of="$D/data" bs=1M count=256 2>/dev/null
sleep 0.5`},
	}
	for _, backend := range cliRunners(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			for _, fill := range fills {
				var took int64
				if os.Geteuid() == 0 {
					base := sessionMemory(t, b, "D=/proc\n"+fill.script)
					took = sessionMemory(t, b, "D=/tmp\n"+fill.script) - base
					t.Logf("%s: %.1f MiB above the baseline (%.1f MiB)", fill.name, float64(took)/(1<<20), float64(base)/(1<<20))
				} else {
					took = filesMemory(t, b, "D=/tmp\n"+fill.script)
					t.Logf("%s: Shmem and Slab grew %.1f MiB", fill.name, float64(took)/(1<<20))
				}
				if took > budget+slack {
					t.Errorf("%s: a filled --tmp-size 128M took %.1f MiB of the host's memory", fill.name, float64(took)/(1<<20))
				}
			}
		})
	}
}

// filesMemory runs script in b under --tmp-size 128M and returns how much the
// machine's file memory (/proc/meminfo's Shmem, tmpfs's pages, and Slab, the
// inodes, dentries, names and attributes) grew from before the script to its end,
// as the sandbox reads it: for a machine where nothing else runs (a VM) and a test
// that cannot make a memory cgroup.
func filesMemory(t *testing.T, b *box, script string) int64 {
	t.Helper()
	const files = `awk '/^(Shmem|Slab):/ { s += $2 } END { print s }' /proc/meminfo`
	out := b.ok("before=$("+files+")\n"+strings.TrimSuffix(script, "sleep 0.5")+"\necho \"files $before $("+files+")\"", "--tmp-size", "128M")
	var before, after int64
	at := strings.LastIndex(out, "files ")
	if at < 0 {
		t.Fatalf("no meminfo from inside: %q", out)
	}
	if _, err := fmt.Sscanf(out[at:], "files %d %d", &before, &after); err != nil {
		t.Fatalf("meminfo inside: %q: %v", out, err)
	}
	return (after - before) << 10
}

// sessionMemory runs script in b under --tmp-size 128M, as root, in a memory cgroup
// of its own, and returns the most the cgroup was charged, polled while it ran.
func sessionMemory(t *testing.T, b *box, script string) int64 {
	t.Helper()
	cmd := b.command(b.repo, []string{"--tmp-size", "128M"}, script)
	dir, usage := memoryCgroup(t)
	if strings.HasSuffix(usage, "memory.usage_in_bytes") {
		// cgroup v1: no clone into a cgroup; the launcher moves itself first.
		testenv.Chown(t, filepath.Join(dir, "cgroup.procs"))
		cmd.Args = append([]string{"/bin/sh", "-c", `echo $$ > "$0" && exec "$@"`, filepath.Join(dir, "cgroup.procs")}, cmd.Args...)
		cmd.Path = "/bin/sh"
	} else {
		fd, err := os.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer fd.Close()
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(fd.Fd())
	}
	return peakWhile(t, cmd, func() (int64, bool) {
		b, err := os.ReadFile(usage)
		if err != nil {
			return 0, false
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n, err == nil
	})
}

// peakWhile runs cmd to its end, which must be success, and returns the most
// measure gave meanwhile, every 5 ms.
func peakWhile(t *testing.T, cmd *exec.Cmd, measure func() (int64, bool)) int64 {
	t.Helper()
	res := make(chan result, 1)
	if err := startAndCollect(cmd, res); err != nil {
		t.Fatal(err)
	}
	var peak int64
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if n, ok := measure(); ok {
			peak = max(peak, n)
		}
		select {
		case r := <-res:
			if r.code != 0 {
				t.Fatalf("%s", r)
			}
			return peak
		case <-tick.C:
		}
	}
}

// memoryCgroup makes a memory cgroup for one session (removed at the test's end)
// and returns its directory and the file of its current charge.
func memoryCgroup(t *testing.T) (dir, usage string) {
	t.Helper()
	name := fmt.Sprintf("agentbox-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	if c, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && slices.Contains(strings.Fields(string(c)), "memory") {
		_ = os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte("+memory"), 0)
		dir, usage = filepath.Join("/sys/fs/cgroup", name), "memory.current"
	} else if _, err := os.Stat("/sys/fs/cgroup/memory/memory.usage_in_bytes"); err == nil {
		dir, usage = filepath.Join("/sys/fs/cgroup/memory", name), "memory.usage_in_bytes"
	} else {
		t.Fatalf("no memory cgroup controller to measure with (cgroup v2's at /sys/fs/cgroup, or v1's at /sys/fs/cgroup/memory)")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for i := 0; i < 100 && os.Remove(dir) != nil; i++ {
			time.Sleep(20 * time.Millisecond)
		}
	})
	return dir, filepath.Join(dir, usage)
}
