package adversarial

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// hugeHogScript takes 2 MiB pages of the hugetlb pool every way a process can —
// a hugetlb memfd, a SHM_HUGETLB segment, then anonymous MAP_HUGETLB mappings until
// the kernel refuses — touching each, writes "TOOK pages errno errno errno" (the
// errno of each way's refusal) to ready, and holds them until its standard input
// ends (at most two minutes).
const hugeHogScript = `
import ctypes, os, select, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.shmat.restype = ctypes.c_void_p
HUGE, FAIL = 2 << 20, ctypes.c_void_p(-1).value
pages, errs = 0, []
fd = libc.memfd_create(b"huge", 4)  # MFD_HUGETLB
p = None
if fd >= 0 and libc.ftruncate(fd, HUGE) == 0:
    p = libc.mmap(None, HUGE, 3, 1, fd, 0)  # MAP_SHARED
if p not in (None, FAIL):
    ctypes.memset(p, 1, 1); pages += 1; errs.append(0)
else:
    errs.append(ctypes.get_errno())
sid = libc.shmget(0, HUGE, 0o1000 | 0o600 | 0o4000)  # IPC_CREAT, SHM_HUGETLB
p = libc.shmat(sid, None, 0) if sid >= 0 else None
if p not in (None, FAIL):
    ctypes.memset(p, 1, 1); pages += 1; errs.append(0)
else:
    errs.append(ctypes.get_errno())
while True:
    p = libc.mmap(None, HUGE, 3, 0x22 | 0x40000, -1, 0)  # MAP_PRIVATE|MAP_ANONYMOUS|MAP_HUGETLB
    if p in (None, FAIL):
        errs.append(ctypes.get_errno()); break
    ctypes.memset(p, 1, 1); pages += 1
with open("ready.tmp", "w") as w:
    w.write("TOOK %d %d %d %d\n" % tuple([pages] + errs))
os.rename("ready.tmp", "ready")
select.select([sys.stdin], [], [], 120)
os.remove("ready")
`

// TestSessionLeavesOthersTheirHugePages: the hugetlb pool (vm.nr_hugepages) is one
// for the whole machine, reserved for databases, DPDK and VMs, and no user
// namespace, memory cgroup or per-user limit counts its pages. A session takes all
// it can; it gets none (docs/security.md), and while it holds what it took the
// pool is whole. The test gives the machine a small pool for the while when it has
// none (as root).
func TestSessionLeavesOthersTheirHugePages(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root to give the machine a huge page pool")
	}
	total := hugePagePool(t)
	runners := everyRunner(t)
	for _, backend := range runners {
		t.Run(backend, func(t *testing.T) {
			x := sandboxtest.NewBox(t, backend)
			cmd := x.Command(x.Repo, []string{"--no-git-save", "--no-record"}, "")
			cmd.Args = append(cmd.Args, "--", "/usr/bin/python3", "-c", hugeHogScript)
			ready := filepath.Join(x.Repo, "ready")
			release := holdSession(t, cmd, ready, "took its huge pages")
			took := sandboxtest.ReadFile(t, ready)
			free := meminfo(t, "HugePages_Free")
			r := release()
			var pages, memfd, shm, anon int
			if _, err := fmt.Sscanf(took, "TOOK %d %d %d %d", &pages, &memfd, &shm, &anon); err != nil {
				t.Fatalf("%v: %q", err, took)
			}
			if pages != 0 {
				t.Errorf("the session took %d of the machine's %d huge pages (errno memfd %d, shm %d, mmap %d); want none", pages, total, memfd, shm, anon)
			}
			if free != total {
				t.Errorf("while the session held what it took, %d of the machine's %d huge pages were free", free, total)
			}
			if r.Code != 0 {
				t.Errorf("the session: %s", r)
			}
		})
	}
}

// hugePagePool returns the number of huge pages the machine's pool holds, all of them
// free; a machine with none gets three for the test, given back at its end.
func hugePagePool(t *testing.T) int {
	const knob = "/proc/sys/vm/nr_hugepages"
	if n := meminfo(t, "HugePages_Total"); n > 0 {
		if free := meminfo(t, "HugePages_Free"); free != n {
			testenv.Skip(t, "the machine's huge page pool is in use (%d of %d free)", free, n)
		}
		return n
	}
	if err := os.WriteFile(knob, []byte("3"), 0); err != nil {
		t.Fatalf("give the machine a huge page pool: %v", err)
	}
	t.Cleanup(func() { _ = os.WriteFile(knob, []byte("0"), 0) })
	n := meminfo(t, "HugePages_Total")
	if n == 0 {
		testenv.Skip(t, "the kernel made no huge page for the pool (memory too fragmented)")
	}
	return n
}

// meminfo is the number /proc/meminfo gives for key.
func meminfo(t *testing.T, key string) int {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, key+":"); ok {
			n, err := strconv.Atoi(strings.Fields(rest)[0])
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("/proc/meminfo has no %s", key)
	return 0
}
