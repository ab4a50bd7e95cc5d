package adversarial

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// The cgroup tree (P12). The rows put the launcher in a cgroup delegated to the test
// user the way systemd delegates a user's service or scope (the directory and its
// cgroup.procs, cgroup.threads and cgroup.subtree_control chowned to the user), with
// a victim process beside it (the terminal's scope), and check that the session
// lives in a leaf of its own below it, that nothing inside changes the delegated
// cgroup, and that nothing is left behind.

// cgroup2Root is where this machine's cgroup2 hierarchy is mounted whole.
func cgroup2Root(t *testing.T) string {
	t.Helper()
	mnts, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup2"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mnts {
		if m.Root == "/" {
			return m.Mountpoint
		}
	}
	testenv.Skip(t, "no cgroup2 hierarchy mounted")
	return ""
}

var cgSeq atomic.Int64

// delegatedCgroup makes a cgroup for the test, owned by the test user when delegate
// is set, and removes it (killing what is left in it) when the test ends.
func delegatedCgroup(t *testing.T, delegate bool) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root: creates and delegates a cgroup")
	}
	dir := filepath.Join(cgroup2Root(t), fmt.Sprintf("agentbox-test-%d-%d", os.Getpid(), cgSeq.Add(1)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCgroupTree(t, dir) })
	if delegate {
		u := testenv.TestUser(t)
		for _, p := range []string{"", "cgroup.procs", "cgroup.threads", "cgroup.subtree_control"} {
			if err := os.Chown(filepath.Join(dir, p), int(u.UID), int(u.GID)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

func removeCgroupTree(t *testing.T, dir string) {
	_ = os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		for n := 0; n < 100; n++ {
			if err := syscall.Rmdir(dirs[i]); err == nil || err == syscall.ENOENT {
				break
			}
			sandboxtest.WaitForUpTo(10e6, func() bool { return false })
		}
	}
}

// inCgroup makes cmd start in the cgroup dir (clone3 CLONE_INTO_CGROUP).
func inCgroup(t *testing.T, cmd *exec.Cmd, dir string) {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = int(f.Fd())
}

// cgroupScript: where the session is, then every way at the delegated cgroup: its
// host path (read-only); a child cloned into it (clone3's CLONE_INTO_CGROUP with a
// descriptor of its read-only host path, which the kernel judges by the inode's
// permission, and without nsdelegate by nothing else: the child, out of the leaf,
// sees its cgroup as "/.."); and a nested user + mount + cgroup namespace with
// cgroup2 mounted, whose root is the session's cgroup (the kernel may refuse the
// mount itself; then only the host's tree after the session judges). The kill comes
// last: with the leaf, it ends the session itself.
const cgroupScript = prelude + `
echo "CGROUP $(grep '^0::' /proc/self/cgroup)"
try host-path-max-descendants sh -c 'echo 1 > "$DELEG/cgroup.max.descendants"'
try host-path-mkdir mkdir "$DELEG/agentbox-planted"
try host-path-freeze sh -c 'echo 1 > "$DELEG/cgroup.freeze"'
clone3into() { perl -MFcntl -e 'sysopen(my $d, $ARGV[0], O_RDONLY|O_DIRECTORY) or die "open: $!\n";
	my $a = pack("Q11", 0x200000000, 0, 0, 0, 17, 0, 0, 0, 0, 0, fileno($d)); my $pid = syscall(435, $a, length($a));
	if ($pid == 0) { open(my $c, "<", "/proc/self/cgroup"); print grep(/^0::/, <$c>); exit 0 }
	die "clone3 errno " . ($!+0) . "\n" if $pid < 0; waitpid($pid, 0)' "$DELEG"; }
escapedLeaf() { clone3into | grep -q '^0::/\.\.'; }
try clone3-into-delegated escapedLeaf
echo "CLONE3 $(clone3into 2>&1)"
mkdir -p /tmp/cg
nested() { unshare -Urmc sh -c "mount -t cgroup2 none /tmp/cg && $1"; }
attempt nested-mkdir nested 'mkdir /tmp/cg/agentbox-planted'
attempt nested-max-descendants nested 'echo 1 > /tmp/cg/cgroup.max.descendants'
attempt nested-max-depth nested 'echo 0 > /tmp/cg/cgroup.max.depth'
attempt nested-memory-max nested 'echo 1M > /tmp/cg/memory.max'
attempt nested-subtree-control nested 'echo +pids > /tmp/cg/cgroup.subtree_control'
attempt nested-freeze-child nested 'mkdir -p /tmp/cg/f && echo 1 > /tmp/cg/f/cgroup.freeze'
echo DONE
nested 'echo 1 > /tmp/cg/cgroup.kill' 2>/dev/null
true
`

// goAPILauncher is the Go API's door through a sandbox.Launcher (godoor's
// AGENTBOX_GODOOR_LAUNCHER).
const goAPILauncher = "go-api-launcher"

// TestSessionCgroup: the session runs in a leaf below the launcher's delegated
// cgroup, so the delegated cgroup, the victim beside the launcher and the tree are
// as they were afterwards, and the leaf is gone.
func TestSessionCgroup(t *testing.T) {
	// Every way the sandbox's first process starts: the CLI's raw init cloned
	// ahead (moved in before its plan), the Go init (cloned into the leaf), the Go
	// API's, and bwrap (started in the leaf, so its child is born there).
	// The Go API's Launcher hands the cgroup to its helper ("go-api-launcher").
	backends := append(sandboxtest.Backends(t), sandboxtest.NativeGo, sandboxtest.GoAPI, goAPILauncher)
	for _, name := range backends {
		backend := name
		if name == goAPILauncher {
			backend = sandboxtest.GoAPI
		}
		t.Run(name, func(t *testing.T) {
			deleg := delegatedCgroup(t, true)
			victim := testenv.Command(t, "/", "sleep", "300")
			inCgroup(t, victim, deleg)
			if err := victim.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = victim.Process.Kill(); _ = victim.Wait() })
			files := []string{"cgroup.max.descendants", "cgroup.max.depth", "cgroup.freeze", "cgroup.subtree_control", "cgroup.type"}
			before := map[string]string{}
			for _, f := range files {
				before[f] = readTrim(filepath.Join(deleg, f))
			}

			x := newTarget(t, backend)
			cmd := x.Command(x.Repo, nil, cgroupScript)
			cmd.Env = append(cmd.Env, "DELEG="+deleg)
			if name == goAPILauncher {
				cmd.Env = append(cmd.Env, "AGENTBOX_GODOOR_LAUNCHER=1")
			}
			inCgroup(t, cmd, deleg)
			r := sandboxtest.Run(cmd)
			attempts.Add(int64(strings.Count(r.Stdout, "TRY ")))
			if !strings.Contains(r.Stdout, "DONE") {
				t.Fatalf("session: %s", r)
			}
			if strings.Contains(r.Stdout, "ESCAPED") {
				t.Errorf("escapes:\n%s", r.Stdout)
			}
			// The sandbox's cgroup namespace is rooted at its leaf: the session sees
			// itself at the root, and nothing of the cgroups above.
			// clone3 is refused as a kernel without it would (ENOSYS); under
			// nsdelegate the kernel refuses the clone into the delegated cgroup
			// itself (ENOENT), without it nothing did.
			if !strings.Contains(r.Stdout, "CLONE3 clone3 errno 38\n") {
				t.Errorf("clone3 was not refused with ENOSYS inside:\n%s", r.Stdout)
			}
			if !strings.Contains(r.Stdout, "CGROUP 0::/\n") {
				t.Errorf("the sandbox's cgroup namespace is not rooted at its own cgroup:\n%s", r.Stdout)
			}
			sessionInLeaf(t, x, name, deleg)
			for _, f := range files {
				if now := readTrim(filepath.Join(deleg, f)); now != before[f] {
					t.Errorf("delegated cgroup's %s: %q, was %q", f, now, before[f])
				}
			}
			st := sandboxtest.ReadFileOr(fmt.Sprintf("/proc/%d/stat", victim.Process.Pid))
			if _, rest, _ := strings.Cut(st, ") "); st == "" || strings.HasPrefix(rest, "Z") {
				t.Errorf("the process beside the launcher was killed from inside")
			}
			// The raw init is moved back here when its leaf is removed and exits once
			// the launcher has (docs/security.md, the cgroup tree): on a loaded
			// machine that can be a moment after the launcher's exit. Anything still
			// here after the bound is a process of the session left behind.
			var procs string
			if !sandboxtest.WaitForUpTo(20*time.Second, func() bool {
				procs = readTrim(filepath.Join(deleg, "cgroup.procs"))
				return procs == fmt.Sprint(victim.Process.Pid)
			}) {
				t.Errorf("delegated cgroup's processes 20 s after the launcher's exit: %q, want only the victim %d", procs, victim.Process.Pid)
			}
			ents, _ := os.ReadDir(deleg)
			for _, e := range ents {
				if e.IsDir() {
					t.Errorf("left behind in the delegated cgroup: %s", e.Name())
				}
			}
		})
	}
}

// sessionInLeaf: while a session runs, its processes are in its leaf below the
// launcher's cgroup deleg, not beside the launcher.
func sessionInLeaf(t *testing.T, x *target, name, deleg string) {
	t.Helper()
	// The command runs until the test has looked (seen), however long the
	// launch took on a loaded machine; it ends on its own, as before.
	seen := filepath.Join(x.Repo, "seen")
	cmd := x.Command(x.Repo, nil, `i=0; while [ ! -e seen ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done`)
	if name == goAPILauncher {
		cmd.Env = append(cmd.Env, "AGENTBOX_GODOOR_LAUNCHER=1")
	}
	inCgroup(t, cmd, deleg)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inLeaf := sandboxtest.WaitForUpTo(time.Minute, func() bool {
		ents, _ := os.ReadDir(deleg)
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), "agentbox-") && readTrim(filepath.Join(deleg, e.Name(), "cgroup.procs")) != "" {
				return true
			}
		}
		return false
	})
	sandboxtest.WriteFile(t, seen, "")
	_ = cmd.Wait()
	if !inLeaf {
		t.Errorf("no process of the running session was in a leaf below %s", deleg)
	}
}

// TestSessionCgroupRefused: a launcher whose cgroup it can write, but below which no
// leaf can be made (cgroup.max.descendants 0), is refused with 125 and one line
// saying why; one in a cgroup it cannot write runs as before, without a leaf.
func TestSessionCgroupRefused(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			deleg := delegatedCgroup(t, true)
			if err := os.WriteFile(filepath.Join(deleg, "cgroup.max.descendants"), []byte("0"), 0); err != nil {
				t.Fatal(err)
			}
			x := newTarget(t, backend)
			cmd := x.Command(x.Repo, nil, "touch "+x.Repo+"/ran")
			inCgroup(t, cmd, deleg)
			r := sandboxtest.Run(cmd)
			lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
			if r.Code != 125 || len(lines) != 1 || !strings.Contains(lines[0], "refused: "+deleg) || sandboxtest.Exists(x.Repo+"/ran") {
				t.Errorf("writable cgroup without a leaf: %s", r)
			}

			closed := delegatedCgroup(t, false)
			cmd = x.Command(x.Repo, nil, `grep '^0::' /proc/self/cgroup`)
			inCgroup(t, cmd, closed)
			r = sandboxtest.Run(cmd)
			if r.Code != 0 || strings.TrimSpace(r.Stdout) != "0::/" {
				t.Errorf("closed cgroup: %s", r)
			}
		})
	}
}
