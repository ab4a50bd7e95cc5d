package adversarial

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/internal/ucounts"
	"golang.org/x/sys/unix"
)

// uringScript defines ring(size): an io_uring with one registered buffer of size
// bytes, or the errno that refused it. Both the ring's own pages (Linux 6.13+)
// and the buffer's are charged to the user's pinned memory (user_struct.locked_vm,
// one count per uid for the whole machine), checked against the caller's
// RLIMIT_MEMLOCK.
const uringScript = `
import ctypes, mmap, os
libc = ctypes.CDLL(None, use_errno=True)
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
def ring(size):
    fd = libc.syscall(%d, 1, ctypes.create_string_buffer(120))
    if fd < 0:
        return None, ctypes.get_errno()
    m = mmap.mmap(-1, size)
    iov = iovec(ctypes.addressof(ctypes.c_char.from_buffer(m)), size)
    if libc.syscall(%d, fd, 0, ctypes.byref(iov), 1) != 0:
        err = ctypes.get_errno()
        os.close(fd)
        return None, err
    return (fd, m), 0
`

// pinHogScript pins up to CAP bytes in registered io_uring buffers, in halving
// chunks until the kernel refuses a page, writes "TOOK bytes errno" to ready and
// holds them until its standard input ends (at most two minutes).
const pinHogScript = `
import select, sys
held, took, size, errno, cap = [], 0, 1 << 20, 0, int(os.environ["CAP"])
while size >= 4096:
    if took + size > cap:
        size //= 2
        continue
    r, errno = ring(size)
    if r is None:
        size //= 2
        continue
    held.append(r)
    took += size
with open("ready.tmp", "w") as w:
    w.write("TOOK %d %d\n" % (took, errno))
os.rename("ready.tmp", "ready")
select.select([sys.stdin], [], [], 120)
os.remove("ready")
`

// pinHostScript is another program of the user's on the host: a ring with one
// buffer of SIZE bytes; it prints "ring 0" or "ring errno".
const pinHostScript = `
r, errno = ring(int(os.environ["SIZE"]))
print("ring", errno)
`

// TestSessionLeavesOthersTheirPinnedMemory: io_uring's rings and registered
// buffers (and MSG_ZEROCOPY sends) are charged to one count of pinned memory per
// uid for the whole machine, checked against the caller's own RLIMIT_MEMLOCK; no
// namespace or cgroup has a level of it. A session pins up to 3/8 of the
// launcher's limit; it is stopped at a quarter (its own RLIMIT_MEMLOCK, lowered
// by the init), and while it holds what it pinned a program of the user's on the
// host still sets up a ring with a buffer of half the limit. On main before the
// change the session pinned its whole cap (with no cap, all of it: the host's
// next io_uring_setup failed with ENOMEM).
func TestSessionLeavesOthersTheirPinnedMemory(t *testing.T) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur == unix.RLIM_INFINITY || lim.Cur > 1<<40 {
		testenv.Skip(t, "RLIMIT_MEMLOCK is unlimited here (%d): the kernel bounds nobody's pinned memory, there is no share to keep", lim.Cur)
	}
	if lim.Cur < 64<<10 {
		t.Fatalf("RLIMIT_MEMLOCK %d: too small to pin a ring and a buffer at all", lim.Cur)
	}
	limit := int64(lim.Cur)
	prelude := fmt.Sprintf(uringScript, unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_REGISTER)
	probe := testenv.Command(t, testenv.Dir(t, "home"), "/usr/bin/python3", "-c", prelude+pinHostScript)
	probe.Env = append(probe.Env, "SIZE=4096")
	if out, err := probe.CombinedOutput(); err != nil || !strings.Contains(string(out), "ring 0\n") {
		// io_uring disabled (kernel.io_uring_disabled) or not built: nothing to pin.
		if strings.Contains(string(out), fmt.Sprintf("ring %d\n", unix.ENOSYS)) || strings.Contains(string(out), fmt.Sprintf("ring %d\n", unix.EPERM)) {
			testenv.SkipKernel(t, "io_uring", "the test user cannot set up an io_uring here: %s", out)
		}
		t.Fatalf("a ring on the host before the session: %s (%v)", out, err)
	}
	for _, backend := range everyRunner(t) {
		t.Run(backend, func(t *testing.T) {
			x := sandboxtest.NewBox(t, backend)
			cmd := x.Command(x.Repo, []string{"--no-git-save", "--no-record"}, "")
			cmd.Args = append(cmd.Args, "--", "/usr/bin/python3", "-c", prelude+pinHogScript)
			cmd.Env = append(cmd.Env, fmt.Sprintf("CAP=%d", limit*3/8))
			ready := filepath.Join(x.Repo, "ready")
			release := holdSession(t, cmd, ready, "pinned its memory")
			var took int64
			var errno int
			got := sandboxtest.ReadFile(t, ready)
			if _, err := fmt.Sscanf(got, "TOOK %d %d", &took, &errno); err != nil {
				t.Fatalf("%v: %q", err, got)
			}
			host := testenv.Command(t, x.Home, "/usr/bin/python3", "-c", prelude+pinHostScript)
			host.Env = append(host.Env, fmt.Sprintf("SIZE=%d", limit/2))
			out, err := host.CombinedOutput()
			r := release()
			if took > limit/4 || unix.Errno(errno) != unix.ENOMEM {
				t.Errorf("the session pinned %d bytes of the user's RLIMIT_MEMLOCK %d (errno %d past it): no limit of its own stopped it at a quarter (ENOMEM)", took, limit, errno)
			}
			if !strings.Contains(string(out), "ring 0\n") {
				t.Errorf("while the session pinned %d bytes, a program of the user's on the host could not register %d: %s (%v)", took, limit/2, out, err)
			}
			if r.Code != 0 {
				t.Errorf("the session: %s", r)
			}
		})
	}
}

// TestGPGSecureMemoryInside: gpg locks 64 KiB of secure memory and warns "using
// insecure memory" when mlock(2) fails. With a launcher limit of 128 KiB the
// session's quarter (32 KiB) was below it, and gpg warned inside; the share is
// now at least 64 KiB where that is at most half of the launcher's limit
// (ucounts.MemlockShare), which leaves the user's host programs the other half.
func TestGPGSecureMemoryInside(t *testing.T) {
	gpg, err := exec.LookPath("gpg")
	if err != nil {
		testenv.Skip(t, "no gpg (scripts/setup-test-env.sh installs gnupg)")
	}
	const launcher = 128 << 10
	for _, backend := range everyRunner(t) {
		t.Run(backend, func(t *testing.T) {
			x := sandboxtest.NewBox(t, backend)
			cmd := x.Command(x.Repo, []string{"--no-git-save", "--no-record"},
				`export GNUPGHOME=$(mktemp -d); "$GPG" --batch --gen-random 0 4 >/dev/null; echo "memlock $(ulimit -l)"`)
			// The launcher runs with the lower limit, as on a host whose default it is.
			cmd.Args = append([]string{"prlimit", fmt.Sprintf("--memlock=%d:%d", launcher, launcher), "--", cmd.Path}, cmd.Args[1:]...)
			cmd.Path = "/usr/bin/prlimit"
			cmd.Env = append(cmd.Env, "GPG="+gpg)
			r := sandboxtest.Run(cmd)
			if r.Code != 0 {
				t.Fatalf("the session: %s", r)
			}
			if want := fmt.Sprintf("memlock %d\n", ucounts.MemlockShare(launcher)>>10); !strings.Contains(r.Stdout, want) {
				t.Errorf("RLIMIT_MEMLOCK inside: %q, want %q", r.Stdout, want)
			}
			if strings.Contains(r.Stderr, "insecure memory") {
				t.Errorf("gpg cannot lock its secure memory inside (launcher's RLIMIT_MEMLOCK %d): %s", launcher, r.Stderr)
			}
		})
	}
}
