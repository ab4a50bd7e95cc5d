package adversarial

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/session/hostaudit"
)

// TestLaunchRefusedWithoutJournal: a session whose crash journal cannot be written
// does not run. Without it a killed launcher's audit never runs, and the next
// launch takes what the session planted for the user's own; so the launch is
// refused (125, one line: what, why, what to do) before the command starts, on
// every runner and the Go API. Two ways the state directory fails: the file
// system is full (a 64 KiB tmpfs, filled), which the repository's pending-audit
// journal meets; and the kept paths' ledger directory is not writable, which a
// --keep session's ledger meets.
func TestLaunchRefusedWithoutJournal(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root to mount a small tmpfs")
	}
	u := testenv.TestUser(t)
	for _, runner := range everyRunner(t) {
		t.Run(runner, func(t *testing.T) {
			b := sandboxtest.NewBox(t, runner)
			// Outside HOME: a mount below HOME stops the overlay over it.
			state := testenv.Dir(t, "state")
			opts := fmt.Sprintf("size=64k,mode=0700,uid=%d,gid=%d", u.UID, u.GID)
			if err := syscall.Mount("tmpfs", state, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
				t.Fatalf("mount tmpfs: %v", err)
			}
			defer syscall.Unmount(state, syscall.MNT_DETACH)
			kept := filepath.Join(b.Home, ".config/kept")
			if err := os.MkdirAll(kept, 0o755); err != nil {
				t.Fatal(err)
			}
			testenv.Chown(t, b.Home)
			launch := func(script string, args ...string) sandboxtest.Result {
				cmd := b.Command(b.Repo, append([]string{"--no-git-save", "--no-record"}, args...), script)
				cmd.Env = append(cmd.Env, "XDG_STATE_HOME="+state)
				return sandboxtest.Run(cmd)
			}
			// The Go API keeps no host paths (Options has no Keep).
			var keep []string
			if runner != sandboxtest.GoAPI {
				keep = []string{"--keep", kept}
			}
			// With room: the grant ledger and the directories are made, and the
			// journal is written and removed.
			if r := launch("true", keep...); r.Code != 0 {
				t.Fatalf("launch with room in the state directory: %s", r)
			}
			marker := filepath.Join(b.Repo, "ran")
			refused := func(what string, r sandboxtest.Result, want ...string) {
				t.Helper()
				lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
				ok := r.Code == 125 && len(lines) == 1 && strings.Contains(r.Stderr, "agentbox starts no session whose audit a killed launcher would leave undone")
				for _, w := range want {
					ok = ok && strings.Contains(r.Stderr, w)
				}
				if !ok {
					t.Errorf("%s: want 125 and one line naming %q, got %s", what, want, r)
				}
				if sandboxtest.Exists(marker) {
					t.Errorf("%s: the command ran without its journal", what)
				}
			}

			// The kept paths' ledger cannot be written: refused before the command.
			if keep != nil {
				live := filepath.Join(state, "agentbox/agents/live")
				if err := os.Chmod(live, 0o500); err != nil {
					t.Fatal(err)
				}
				refused("kept paths' ledger not writable", launch("touch "+marker, keep...), "kept-path audit", "permission denied")
				if err := os.Chmod(live, 0o700); err != nil {
					t.Fatal(err)
				}
				if ents, _ := os.ReadDir(live); len(ents) != 0 {
					t.Errorf("the refused launch left its registration: %v", ents)
				}
			}

			// The file system is full: the pending-audit journal cannot be written.
			fill(t, filepath.Join(state, "fill"))
			refused("state directory full", launch("touch "+marker), "pending-audit journal", "no space left on device")
			if ents, _ := os.ReadDir(filepath.Join(state, "agentbox/audit-pending")); len(ents) != 0 {
				t.Errorf("the refused launch left a journal: %v", ents)
			}
			// With room again, the same launch runs.
			if err := os.Remove(filepath.Join(state, "fill")); err != nil {
				t.Fatal(err)
			}
			if r := launch("touch " + marker); r.Code != 0 || !sandboxtest.Exists(marker) {
				t.Errorf("launch with room again: %s", r)
			}
		})
	}
}

// fill writes path until its file system has no block left.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

// TestAuditFindingLinesBounded: a session that plants many findings (here 40
// nested repositories with core.fsmonitor) gets at most hostaudit.MaxShownFindings
// finding lines on the operator's terminal and one line naming how many more there
// are and the file in the quarantine that lists every one; each plant is still
// moved aside. On main every line was printed (3,000 plants: 850 KB).
func TestAuditFindingLinesBounded(t *testing.T) {
	const planted = 40
	for _, runner := range everyRunner(t) {
		t.Run(runner, func(t *testing.T) {
			b := sandboxtest.NewBox(t, runner)
			r := b.Sh(fmt.Sprintf(`for i in $(seq %d); do git init -q n$i && git -C n$i config core.fsmonitor "touch /tmp/x"; done`, planted), "--no-git-save")
			var findings []string
			var more string
			for _, line := range strings.Split(r.Stderr, "\n") {
				if !strings.HasPrefix(line, "agentbox: audit: ") {
					continue
				}
				if strings.Contains(line, "more finding(s), not shown") {
					more = line
				} else {
					findings = append(findings, line)
				}
			}
			if len(findings) != hostaudit.MaxShownFindings || more == "" {
				t.Fatalf("%d plants: %d finding lines printed, want %d and one naming the rest: %s", planted, len(findings), hostaudit.MaxShownFindings, r)
			}
			_, list, ok := strings.Cut(more, "are listed in ")
			if !ok || !strings.Contains(more, fmt.Sprintf("and %d more", planted-hostaudit.MaxShownFindings)) {
				t.Fatalf("the line naming the rest: %q", more)
			}
			data, err := os.ReadFile(list)
			if err != nil || strings.Count(string(data), "core.fsmonitor") != planted {
				t.Errorf("the list %s: %v, %d findings of %d", list, err, strings.Count(string(data), "core.fsmonitor"), planted)
			}
			for i := 1; i <= planted; i++ {
				if cfg, _ := os.ReadFile(filepath.Join(b.Repo, fmt.Sprintf("n%d/.git/config", i))); strings.Contains(string(cfg), "fsmonitor") {
					t.Errorf("n%d: the plant stayed", i)
				}
			}
		})
	}
}
