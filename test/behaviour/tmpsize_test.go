package behaviour

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/policy"
)

// TestTmpBudget: --tmp-size (issue 33) on every backend and runner. A write past the
// budget in /tmp gets ENOSPC. Native: /tmp, /run, /dev, /dev/shm and HOME's upper
// layer are one tmpfs, so once /tmp is full there is no room left in any of them.
// bwrap: each tmpfs it can size is bounded on its own, so /dev/shm still takes a
// little once /tmp is full, and is bounded too. The Go API's TmpSize is the same
// budget.
func TestTmpBudget(t *testing.T) {
	for _, backend := range runners(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			paths := `/tmp/a /dev/shm/b /run/c "$HOME/d" /dev/e`
			want := []string{"/tmp/a full", "shm small full", "/dev/shm/b full", "/run/c full", b.home + "/d full", "/dev/e full"}
			if backend == "bwrap" {
				// Separate tmpfs mounts of 8M each; HOME's upper layer and /dev are
				// bwrap's own, unsized (docs/usage.md), so they are not written.
				paths = "/tmp/a /dev/shm/b /run/c"
				want = []string{"/tmp/a full", "shm small ok", "/dev/shm/b full", "/run/c full"}
			}
			// Each dd writes twice what the budget holds; once /tmp is full, a small
			// write to /dev/shm shows whether the two share it.
			out := b.ok(`for f in `+paths+`; do
  if err=$(dd if=/dev/zero of="$f" bs=1M count=16 2>&1); then echo "$f ok"
  else case $err in *"No space left on device"*) echo "$f full";; *) echo "$f other: $err" | tr '\n' ' '; echo;; esac; fi
  if [ "$f" = /tmp/a ]; then
    if dd if=/dev/zero of=/dev/shm/small bs=64k count=1 2>/dev/null; then echo "shm small ok"; else echo "shm small full"; fi
    rm -f /dev/shm/small
  fi
done`, "--tmp-size", "8M")
			for _, w := range want {
				if !strings.Contains(out, w+"\n") {
					t.Errorf("want %q inside, got:\n%s", w, out)
				}
			}
		})
	}
}

// TestTmpBudgetInodes: on the native backend the budget bounds inodes too, one per
// 4 KiB page (2048 for 8M), since empty files take kernel memory but no page. bwrap
// cannot set a tmpfs's inode count: its /tmp takes the kernel's default.
func TestTmpBudgetInodes(t *testing.T) {
	for _, backend := range cliRunners(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			out := b.ok(`cd /tmp && seq -f f%g 3000 | xargs touch 2>&1 | grep -m1 -o 'No space left on device'; ls | grep -c '^f'`, "--tmp-size", "8M")
			if backend == "bwrap" {
				if out != "3000\n" {
					t.Errorf("bwrap's /tmp: %q, want all 3000 files made", out)
				}
				return
			}
			n, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(out), "No space left on device\n"))
			if !strings.HasPrefix(out, "No space left on device\n") || err != nil || n < 1900 || n > 2048 {
				t.Errorf("3000 empty files in an 8M budget: %q, want ENOSPC after at most 2048", out)
			}
		})
	}
}

// TestTmpBudgetDefault: without --tmp-size the RAM-backed filesystems are bounded by
// the default (a quarter of RAM, at most 4G), not the kernel's half of RAM each.
func TestTmpBudgetDefault(t *testing.T) {
	want := policy.DefaultTmpSize(policy.TotalRAM())
	for _, backend := range cliRunners(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			paths := "/tmp /run /dev/shm"
			if backend != "bwrap" {
				paths += ` /dev "$HOME"`
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
	if out := b.ok(`stat -f -c '%b %S' /tmp`, "--tmp-size", "8M"); out != fmt.Sprintf("%d 4096\n", 4<<20/4096) {
		t.Errorf("lowered by the repository's file: /tmp is %q", out)
	}
	writeFile(t, b.repo+"/.agentbox.toml", "tmp-size = \"16M\"\n")
	r := b.fixture().Sh(`echo RAN`, "--tmp-size", "8M")
	if r.Code != 125 || strings.Contains(r.Stdout, "RAN") || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 ||
		!strings.Contains(r.Stderr, "may only lower it") {
		t.Errorf("raised by the repository's file: %s", r)
	}
}
