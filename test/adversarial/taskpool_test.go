package adversarial

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// threadHogScript starts up to CAP threads (small stacks), each waiting, until the
// kernel refuses one, writes "TOOK n" to ready and holds them until its standard
// input ends (at most two minutes).
const threadHogScript = `
import os, select, sys, threading
threading.stack_size(65536)
stop, n = threading.Event(), 0
try:
    while n < int(os.environ["CAP"]):
        threading.Thread(target=stop.wait, daemon=True).start()
        n += 1
except RuntimeError:
    pass
with open("ready.tmp", "w") as w:
    w.write("TOOK %d\n" % n)
os.rename("ready.tmp", "ready")
select.select([sys.stdin], [], [], 120)
os.remove("ready")
stop.set()
`

// TestSessionLeavesOthersTheirTasks: every process and thread of the machine, of
// every user, root's daemons included, draws on one pool, kernel.pid_max (or
// kernel.threads-max where lower). A quarter of a user's RLIMIT_NPROC can be more
// than the pool (96,367 against 32,768 on a default Debian host), and an
// unlimited one bounded nothing. A session starts threads up to 3/8 of the pool;
// it is stopped at a quarter (its RLIMIT_NPROC), and while it holds them a
// program of the user's on the host still starts one. On main before the change
// the session started its whole cap, on every runner.
func TestSessionLeavesOthersTheirTasks(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root: starts the sessions as the test user")
	}
	pool := min(readInt(t, "/proc/sys/kernel/pid_max"), readInt(t, "/proc/sys/kernel/threads-max"))
	for _, backend := range everyRunner(t) {
		t.Run(backend, func(t *testing.T) {
			x := sandboxtest.NewBox(t, backend)
			cmd := x.Command(x.Repo, []string{"--no-git-save", "--no-record"}, "")
			cmd.Args = append(cmd.Args, "--", "/usr/bin/python3", "-c", threadHogScript)
			cmd.Env = append(cmd.Env, fmt.Sprintf("CAP=%d", pool*3/8))
			ready := filepath.Join(x.Repo, "ready")
			release := holdSession(t, cmd, ready, "started its threads")
			var took int64
			got := sandboxtest.ReadFile(t, ready)
			if _, err := fmt.Sscanf(got, "TOOK %d", &took); err != nil {
				t.Fatalf("%v: %q", err, got)
			}
			out, err := testenv.Command(t, x.Home, "sh", "-c", "sleep 0 & wait; echo forked").CombinedOutput()
			r := release()
			if took > pool/4 {
				t.Errorf("the session started %d tasks of the machine's pool of %d: no limit of its own stopped it at a quarter", took, pool)
			}
			if !strings.Contains(string(out), "forked") {
				t.Errorf("while the session held %d tasks, the user could not fork on the host: %s (%v)", took, out, err)
			}
			if r.Code != 0 {
				t.Errorf("the session: %s", r)
			}
		})
	}
}
