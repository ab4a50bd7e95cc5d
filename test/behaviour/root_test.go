package behaviour

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testenv"
)

// TestStartedAsRoot checks that the promises hold when root launches agentbox: uid 0
// maps to itself, but the command still has no capability and cannot write the host.
func TestStartedAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root: runs agentbox as root")
	}
	for _, backend := range runners(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			// Root owns its repository; without capabilities it could not write one
			// owned by someone else (that is checked too: no DAC override).
			_ = filepath.Walk(b.repo, func(p string, _ os.FileInfo, err error) error {
				if err == nil {
					err = os.Lchown(p, 0, 0)
				}
				return err
			})
			cmd := b.command(b.repo, nil, `id -u
				grep -E '^Cap(Prm|Eff|Bnd|Amb):' /proc/self/status
				touch /etc/agentbox-root-probe 2>/dev/null && echo WROTE-ETC
				echo x >> .git/config 2>/dev/null && echo WROTE-CONFIG
				mount -o remount,rw / 2>/dev/null && echo REMOUNTED
				unshare -Urm sh -c 'mount -o remount,rw / && touch /etc/agentbox-root-probe' 2>/dev/null && echo NESTED
				echo x > "$REPO/root-wrote" && echo REPO-OK
				touch "$HOME/.root-probe" 2>/dev/null && echo DAC-OVERRIDE-HOME
				touch "$REPO/user-owned/probe" 2>/dev/null && echo DAC-OVERRIDE
				echo 1000 > /proc/1/oom_score_adj 2>/dev/null && echo PID1-OOM-SCORE
				prlimit --pid 1 --cpu=1:1 2>/dev/null && echo PID1-PRLIMIT
				echo 1 > /proc/sys/vm/drop_caches 2>/dev/null && echo WROTE-PROC-SYS
				echo 1 > /proc/sys/kernel/sysrq 2>/dev/null && echo WROTE-PROC-SYS
				cat /proc/keys 2>/dev/null | grep -q . && echo READ-KEYS
				mkdir /sys/fs/cgroup/agentbox-root-probe 2>/dev/null && echo CGROUP-MKDIR
				for c in /sys/fs/cgroup/cgroup.subtree_control /sys/fs/cgroup/unified/cgroup.subtree_control; do test -e $c && echo +pids > $c 2>/dev/null && echo CGROUP-WRITE; done
				echo "HOME-MODE $(stat -c '%a %u %g' "$HOME")"
				kill -SEGV 1; kill -TERM 1; kill -KILL 1; true`)
			userOwned := filepath.Join(b.repo, "user-owned")
			if err := os.Mkdir(userOwned, 0o755); err != nil {
				t.Fatal(err)
			}
			testenv.Chown(t, userOwned)
			cmd.SysProcAttr = nil // stay root
			cmd.Env = append(cmd.Env, rootStateEnv(t)...)
			r := run(cmd)
			if r.code != 0 {
				t.Fatalf("%s", r)
			}
			for _, c := range []string{"CapPrm", "CapEff", "CapBnd", "CapAmb"} {
				if !strings.Contains(r.stdout, c+":\t0000000000000000") {
					t.Errorf("%s not empty as root:\n%s", c, r.stdout)
				}
			}
			// PID 1's /proc files are the command's as root: its OOM score and
			// limits must stay out of reach all the same, as must its end.
			for _, bad := range []string{"WROTE-ETC", "WROTE-CONFIG", "REMOUNTED", "NESTED", "DAC-OVERRIDE", "PID1-OOM-SCORE", "PID1-PRLIMIT", "WROTE-PROC-SYS", "READ-KEYS", "CGROUP-MKDIR", "CGROUP-WRITE"} {
				if strings.Contains(r.stdout, bad) {
					t.Errorf("%s as root:\n%s", bad, r.stdout)
				}
			}
			// Someone else's 0755 HOME: the upper dir stays root's, with only what
			// others may do (overlay.UpperFor), so root gains no owner's rights.
			if !strings.Contains(r.stdout, "HOME-MODE 555 0 0\n") {
				t.Errorf("HOME inside as root, want mode 555 owned by root:\n%s", r.stdout)
			}
			if !strings.HasPrefix(r.stdout, "0\n") || !strings.Contains(r.stdout, "REPO-OK") {
				t.Errorf("root session: %s", r)
			}
			for _, d := range []string{"/sys/fs/cgroup/agentbox-root-probe", "/sys/fs/cgroup/unified/agentbox-root-probe"} {
				if exists(d) {
					os.Remove(d)
					t.Errorf("root session made a host cgroup %s", d)
				}
			}
			if exists("/etc/agentbox-root-probe") {
				os.Remove("/etc/agentbox-root-probe")
				t.Fatal("root session wrote /etc")
			}
		})
	}
}

// TestDryRun checks the printed plan: every check done, nothing launched, the order
// of docs/promises.md (root read-only, private /proc /dev /tmp /run, HOME, repo, .git pinned,
// push guard, Git paths).
func TestDryRun(t *testing.T) {
	b := newBox(t, "native")
	cmd := testenv.Command(t, b.home, b.bin, "exec", "--dry-run", "--json", "--", "touch", "/tmp/x")
	cmd.Dir = b.repo
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	var plan struct {
		Ops []struct{ Op, Source, Dest, Why string } `json:"ops"`
	}
	if err := json.Unmarshal(out, &plan); err != nil {
		t.Fatalf("dry-run JSON: %v\n%s", err, out)
	}
	var order []string
	for _, op := range plan.Ops {
		if op.Why == "P4 host socket unreachable" {
			continue // the host's daemons' sockets (other tests' too), masked: mounts' tests
		}
		order = append(order, op.Op+" "+op.Dest)
	}
	// The push guard's binds (P9) sit between the repo and the Git paths; their
	// number depends on where the host keeps Git.
	var guard []string
	for _, o := range order {
		if strings.Contains(o, "/run/agentbox/") || strings.HasSuffix(o, "/git") || strings.Contains(o, "/git-") {
			guard = append(guard, o)
		}
	}
	if len(guard) == 0 {
		t.Fatalf("no push-guard binds in the plan:\n%s", strings.Join(order, "\n"))
	}
	want := []string{"ro-bind /", "proc /proc", "dev /dev", "tmpfs /tmp", "tmpfs /run",
		"overlay " + b.home, "bind " + b.repo, "bind " + filepath.Join(b.repo, ".git")}
	want = append(want, guard...)
	want = append(want, "ro-bind "+filepath.Join(b.repo, ".git/config"), "ro-bind "+filepath.Join(b.repo, ".git/hooks"))
	if strings.Join(order, "\n") != strings.Join(want, "\n") {
		t.Fatalf("plan order:\n%s\nwant:\n%s", strings.Join(order, "\n"), strings.Join(want, "\n"))
	}
	text := exec.Command(b.bin, "exec", "--dry-run", "--repo", b.repo, "--", "true")
	text.Env = append([]string{"HOME=" + b.home, "PATH=/usr/bin:/bin"}, rootStateEnv(t)...)
	tout, err := text.Output()
	if err != nil || !strings.Contains(string(tout), "bind     "+b.repo) {
		t.Fatalf("text plan: %v\n%s", err, tout)
	}
}

// rootStateEnv gives root, launching agentbox in a HOME that is not its own, state
// and cache directories of its own: agentbox refuses to write into another user's.
func rootStateEnv(t *testing.T) []string {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "launching agentbox as root needs root")
	}
	d := testenv.Dir(t, "rootstate")
	if err := os.Lchown(d, 0, 0); err != nil {
		t.Fatal(err)
	}
	return []string{"XDG_STATE_HOME=" + d + "/state", "XDG_CACHE_HOME=" + d + "/cache"}
}
