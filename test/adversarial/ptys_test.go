package adversarial

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/internal/ucounts"
)

// holdPtys opens terminals until the kernel refuses one or it holds CAP_PTYS,
// writes how many it holds to held, and keeps them until release appears (at most
// a minute).
const holdPtys = `
import os, resource, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held, release = sys.argv[1], sys.argv[2]
ptys, why = [], "cap"
while len(ptys) < int(os.environ["CAP_PTYS"]):
    try:
        ptys.append(os.openpty())
    except OSError as e:
        why = e.strerror
        break
open(held + ".tmp", "w").write("%d %s\n" % (len(ptys), why.replace(" ", "_")))
os.rename(held + ".tmp", held)
for _ in range(600):
    if os.path.exists(release):
        break
    time.sleep(0.1)
`

// TestSessionLeavesOthersTheirTerminals: every devpts instance but the host's
// initial one draws on one pool of terminals (kernel.pty.max less kernel.pty.reserve),
// so a session that opened them all left every other session, container and sandbox
// on the machine without a terminal while it ran (ENOSPC). A session's own devpts
// holds at most a quarter of the pool (ucounts.PtyMax): while one holds all it can
// get, another session still opens one. The hog stops at 3/8 of the pool, so that
// where nothing stops it (main before the fix) the row fails on the count without
// leaving the machine's other sessions without a terminal.
func TestSessionLeavesOthersTheirTerminals(t *testing.T) {
	pool := ptyPool(t)
	share, err := ucounts.PtyMax()
	if err != nil {
		t.Fatal(err)
	}
	runners := everyRunner(t)
	for _, backend := range runners {
		t.Run(backend, func(t *testing.T) {
			box := sandboxtest.NewBox(t, backend)
			sandboxtest.WriteFile(t, filepath.Join(box.Repo, "hold.py"), holdPtys)
			testenv.Chown(t, box.Repo)
			held, release := filepath.Join(box.Repo, "held"), filepath.Join(box.Repo, "release")
			cmd := box.Command(box.Repo, []string{"--no-git-save", "--no-record"}, `exec python3 hold.py "$REPO/held" "$REPO/release"`)
			cmd.Env = append(cmd.Env, fmt.Sprintf("CAP_PTYS=%d", pool*3/8))
			res := make(chan sandboxtest.Result, 1)
			if err := sandboxtest.StartAndCollect(cmd, res); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = os.WriteFile(release, nil, 0o644) }()
			if !sandboxtest.WaitForUpTo(60*time.Second, func() bool { return sandboxtest.Exists(held) }) {
				os.WriteFile(release, nil, 0o644)
				t.Fatalf("the session never held its terminals:\n%s", <-res)
			}
			other := sandboxtest.NewBox(t, "native")
			second := other.Sh(`python3 -c 'import os; os.openpty(); print("other session: pty ok")'`, "--no-git-save", "--no-record")
			if err := os.WriteFile(release, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if r := <-res; r.Code != 0 {
				t.Fatalf("session:\n%s", r)
			}
			var n int
			var why string
			if _, err := fmt.Sscan(sandboxtest.ReadFile(t, held), &n, &why); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(second.Stdout, "other session: pty ok") {
				t.Errorf("while one session held %d terminals (then %s), another got none:\n%s", n, why, second)
			}
			if n > int(share) || share > int64(pool/4) || why != "No_space_left_on_device" {
				t.Errorf("the session held %d terminals of the %d the pool has (then %s): want at most its share %d, a quarter, and ENOSPC", n, pool, why, share)
			}
		})
	}
}

// ptyPool is the number of terminals devpts instances outside the host's initial
// one share.
func ptyPool(t *testing.T) int {
	read := func(name string) int {
		b, err := os.ReadFile("/proc/sys/kernel/pty/" + name)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return read("max") - read("reserve")
}
