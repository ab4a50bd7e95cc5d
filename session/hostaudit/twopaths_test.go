package hostaudit

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/policy"
)

// TestTwoSessionsTwoPaths: two sessions of one repository at once, the second
// launched through another path to it: the repository moved to a new name while
// the first runs, and, as root, a bind mount of it. The second waits for the
// audit lock the first's path takes, and inherits the first's baseline: the
// first session plants core.fsmonitor, its audit moves it aside, the second
// session puts it back, and the second audit finds it. Before, the second launch
// took the plant for the user's own and its audit passed it. An undo through the
// second path is refused while the first session runs.
func TestTwoSessionsTwoPaths(t *testing.T) {
	for _, how := range []string{"moved", "bind mount"} {
		t.Run(strings.ReplaceAll(how, " ", "_"), func(t *testing.T) {
			top, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			state := filepath.Join(top, "state")
			first, second := filepath.Join(top, "repo"), filepath.Join(top, "other")
			if err := os.MkdirAll(filepath.Join(first, ".git/hooks"), 0o755); err != nil {
				t.Fatal(err)
			}
			config := "[core]\n\tbare = false\n"
			writeTestFile(t, filepath.Join(first, ".git/config"), config)
			var stderr bytes.Buffer
			cfg := &Config{Stderr: &stderr, NoRecord: true}
			a, err := Start(cfg, &policy.Policy{Repo: first, StateDir: state}, nil)
			if err != nil {
				t.Fatal(err)
			}
			// The audit lock taken through the first path (as the first session's
			// audit takes it) is the one the second path's launch waits for.
			held, err := takeRepoAuditLock(state, first)
			if err != nil {
				t.Fatal(err)
			}
			switch how {
			case "moved":
				if err := os.Rename(first, second); err != nil {
					t.Fatal(err)
				}
			case "bind mount":
				bindMount(t, first, second)
			}
			old := auditLockWait
			auditLockWait = 100 * time.Millisecond
			_, err = Start(cfg, &policy.Policy{Repo: second, StateDir: state}, nil)
			auditLockWait = old
			held()
			if err == nil {
				t.Fatalf("%s: a launch through %s started while the audit lock of %s was held", how, second, first)
			}
			// Nor does an undo through the second path write the tree the first
			// session runs in.
			if release, err := HoldRepo(state, second); err == nil {
				release()
				t.Errorf("%s: agentbox undo could hold %s while a session runs in it through %s", how, second, first)
			}
			plant := config + "\tfsmonitor = planted\n"
			// The first session plants, through either path: one directory.
			writeTestFile(t, filepath.Join(second, ".git/config"), plant)

			b, err := Start(cfg, &policy.Policy{Repo: second, StateDir: state}, nil)
			if err != nil {
				t.Fatal(err)
			}
			var outA, outB Outcome
			a.Finish(cfg, &outA)
			if len(outA.AuditFindings) == 0 {
				t.Fatalf("%s: the first session's audit found nothing:\n%s", how, stderr.String())
			}
			// The second session puts the plant back.
			writeTestFile(t, filepath.Join(second, ".git/config"), plant)
			b.Finish(cfg, &outB)
			if !strings.Contains(strings.Join(outB.AuditFindings, "\n"), "fsmonitor") {
				t.Errorf("%s: the plant the second session put back passed its audit (findings %q):\n%s", how, outB.AuditFindings, stderr.String())
			}
		})
	}
}

// bindMount binds dir at path (made here) until the test ends: as root; it skips
// otherwise.
func bindMount(t *testing.T, dir, path string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a bind mount needs root") // never under the test command, which runs as root
	}
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(dir, path, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(path, unix.MNT_DETACH) })
}
