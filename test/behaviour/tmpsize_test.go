package behaviour

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

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

// TestTmpBudgetInodes: the budget bounds inodes too, one per 4 KiB page (2048 for
// 8M), since empty files take kernel memory but no page.
func TestTmpBudgetInodes(t *testing.T) {
	for _, backend := range cliRunners(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			out := b.ok(`cd /tmp && seq -f f%g 3000 | xargs touch 2>&1 | grep -m1 -o 'No space left on device'; ls | grep -c '^f'`, "--tmp-size", "8M")
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
