package adversarial

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"golang.org/x/sys/unix"
)

// aioHogScript reserves Linux AIO events (io_setup) in halving chunks until the
// kernel refuses even one, writes "TOOK events errno" to ready, and holds the
// contexts until its standard input ends (at most two minutes).
const aioHogScript = `
import ctypes, os, select, sys
libc = ctypes.CDLL(None, use_errno=True)
ctxs, events, n = [], 0, 1 << 20
while n >= 1:
    ctx = ctypes.c_ulong(0)
    if libc.syscall(%d, n, ctypes.byref(ctx)) == 0:
        ctxs.append(ctx)
        events += n
    else:
        n //= 2
with open("ready.tmp", "w") as w:
    w.write("TOOK %%d %%d\n" %% (events, ctypes.get_errno()))
os.rename("ready.tmp", "ready")
select.select([sys.stdin], [], [], 120)
os.remove("ready")
`

// aioHostScript is another program of the user's on the host reserving one AIO
// event; it prints "io_setup 0" or "io_setup errno".
const aioHostScript = `
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
ctx = ctypes.c_ulong(0)
print("io_setup", 0 if libc.syscall(%d, 1, ctypes.byref(ctx)) == 0 else ctypes.get_errno())
`

// TestSessionLeavesOthersTheirAIO: Linux AIO events come from one pool for the
// whole machine (fs.aio-max-nr), which no namespace, cgroup or per-user limit
// bounds. A session reserves all it can; it gets none (io_setup fails with ENOSYS,
// docs/security.md), and while it runs a program of the user's on the host still
// reserves one.
func TestSessionLeavesOthersTheirAIO(t *testing.T) {
	runners := everyRunner(t)
	for _, backend := range runners {
		t.Run(backend, func(t *testing.T) {
			x := sandboxtest.NewBox(t, backend)
			cmd := x.Command(x.Repo, []string{"--no-git-save", "--no-record"}, "")
			cmd.Args = append(cmd.Args, "--", "/usr/bin/python3", "-c", fmt.Sprintf(aioHogScript, unix.SYS_IO_SETUP))
			ready := filepath.Join(x.Repo, "ready")
			release := holdSession(t, cmd, ready, "reserved its AIO events")
			var events, errno int
			took := sandboxtest.ReadFile(t, ready)
			if _, err := fmt.Sscanf(took, "TOOK %d %d", &events, &errno); err != nil {
				t.Fatalf("%v: %q", err, took)
			}
			host := testenv.Command(t, x.Home, "/usr/bin/python3", "-c", fmt.Sprintf(aioHostScript, unix.SYS_IO_SETUP))
			out, err := host.CombinedOutput()
			r := release()
			if events != 0 || unix.Errno(errno) != unix.ENOSYS {
				t.Errorf("the session reserved %d AIO events of the machine's one pool (errno %d at the next); want none, ENOSYS", events, errno)
			}
			if !strings.Contains(string(out), "io_setup 0\n") {
				t.Errorf("while the session held %d AIO events, a program of the user's on the host could reserve none: %s (%v)", events, out, err)
			}
			if r.Code != 0 {
				t.Errorf("the session: %s", r)
			}
		})
	}
}
