package adversarial

import (
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// diskTmpDirs lists the --disk-tmp session directories (not their lock files).
func diskTmpDirs(home string) []string {
	m, _ := filepath.Glob(filepath.Join(home, ".cache/agentbox/tmp/*"))
	var dirs []string
	for _, p := range m {
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			dirs = append(dirs, p)
		}
	}
	return dirs
}

// guardDirs lists the push-guard staging directories a launcher with this PID made
// (not their lock files).
func guardDirs(pid int) []string {
	m, _ := filepath.Glob(fmt.Sprintf("/tmp/agentbox-guard-%d-*", pid))
	var dirs []string
	for _, p := range m {
		if !strings.HasSuffix(p, ".lock") { // the launcher's claim beside it (agentbox gc)
			dirs = append(dirs, p)
		}
	}
	return dirs
}

func gc(t *testing.T, b *sandboxtest.Box, args ...string) sandboxtest.Result {
	t.Helper()
	cmd := testenv.Command(t, b.Home, b.Bin, append([]string{"gc"}, args...)...)
	return sandboxtest.Run(cmd)
}

// startSession starts a session whose command starts two sleepers named marker
// (one in its own session), touches ready and waits; it returns once both run.
func startSession(t *testing.T, b *sandboxtest.Box, marker string, args ...string) (*exec.Cmd, chan sandboxtest.Result) {
	t.Helper()
	ready := filepath.Join(b.Repo, "ready-"+marker)
	cmd := b.Command(b.Repo, args, fmt.Sprintf(`echo data > /tmp/f
		bash -c 'exec -a %[1]s sleep 300' & setsid bash -c 'exec -a %[1]s sleep 300' &
		touch %[2]s; wait`, marker, ready))
	res := make(chan sandboxtest.Result, 1)
	if err := sandboxtest.StartAndCollect(cmd, res); err != nil {
		t.Fatal(err)
	}
	if !sandboxtest.WaitFor(func() bool { return sandboxtest.Exists(ready) && len(sandboxtest.Pgrep(marker)) == 2 }) {
		_ = cmd.Process.Kill()
		t.Fatalf("session never started: %s", <-res)
	}
	return cmd, res
}

// TestLauncherKilled: SIGKILL to the launcher mid-session. Every sandboxed process
// dies; the session's --disk-tmp directory stays behind until
// `agentbox gc`, which removes it and leaves a live session's alone. (The push guard
// is cached, not staged: nothing of it is left. Staging dirs of killed launchers, the
// fallback's, are gc's too: session's TestGCOwnership.)
func TestLauncherKilled(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			flags := []string{"--disk-tmp", "--no-git-save", "--no-record"}

			live, liveRes := startSession(t, b, "agentbox-live-"+filepath.Base(b.Home), flags...)
			liveDirs := diskTmpDirs(b.Home)
			liveGuard := guardDirs(live.Process.Pid)
			if len(liveDirs) != 1 {
				t.Fatalf("live session's --disk-tmp dirs: %v", liveDirs)
			}

			marker := "agentbox-killed-" + filepath.Base(b.Home)
			cmd, res := startSession(t, b, marker, flags...)
			killedDirs := append(diskTmpDirs(b.Home)[:0:0], diskTmpDirs(b.Home)...)
			killedGuard := guardDirs(cmd.Process.Pid)
			_ = cmd.Process.Kill()
			<-res
			// Each death needs its process scheduled, which a loaded machine delays
			// by more than a second at times.
			if !sandboxtest.WaitForUpTo(sandboxtest.GoneBound, func() bool { return len(sandboxtest.Pgrep(marker)) == 0 }) {
				t.Errorf("sandboxed processes alive after the launcher was killed: %v", sandboxtest.Pgrep(marker))
			}
			if len(killedGuard) != 0 || len(liveGuard) != 0 {
				t.Fatalf("push-guard staging dirs: killed session %v, live session %v; want none (the guard is cached)", killedGuard, liveGuard)
			}
			if len(killedDirs) != 2 {
				t.Fatalf("--disk-tmp dirs with two sessions: %v", killedDirs)
			}
			if len(diskTmpDirs(b.Home)) != 2 {
				t.Fatalf("the killed launcher's --disk-tmp dir is not left behind (nothing for gc to test): %v", diskTmpDirs(b.Home))
			}

			dry := gc(t, b, "--dry-run")
			if dry.Code != 0 || len(diskTmpDirs(b.Home)) != 2 || !strings.Contains(dry.Stdout, "would be removed") {
				t.Fatalf("gc --dry-run: %s", dry)
			}
			r := gc(t, b)
			if r.Code != 0 {
				t.Fatalf("gc: %s", r)
			}
			left := diskTmpDirs(b.Home)
			if len(left) != 1 || left[0] != liveDirs[0] {
				t.Errorf("after gc: %v; want only the live session's %v\n%s", left, liveDirs, r)
			}
			if !strings.Contains(r.Stdout, "kept "+liveDirs[0]) {
				t.Errorf("gc did not report the live dir as kept:\n%s", r)
			}
			// The live session still has its /tmp and ends normally.
			if err := live.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			lr := <-liveRes
			if lr.Code != 143 {
				t.Errorf("live session after gc: %s", lr)
			}
			if d := diskTmpDirs(b.Home); len(d) != 0 {
				t.Errorf("--disk-tmp dir left after the live session ended: %v", d)
			}
			if locks, _ := filepath.Glob(filepath.Join(b.Home, ".cache/agentbox/tmp/*.lock")); len(locks) != 0 {
				t.Errorf("lock files left: %v", locks)
			}
		})
	}
}

// TestCommandKilledBySignal: the command killed by each common signal gives 128+N and
// leaves no mount, temp dir or process behind.
func TestCommandKilledBySignal(t *testing.T) {
	sigs := []struct {
		name string
		num  syscall.Signal
	}{{"HUP", syscall.SIGHUP}, {"INT", syscall.SIGINT}, {"QUIT", syscall.SIGQUIT}, {"ABRT", syscall.SIGABRT},
		{"KILL", syscall.SIGKILL}, {"SEGV", syscall.SIGSEGV}, {"PIPE", syscall.SIGPIPE}, {"ALRM", syscall.SIGALRM},
		{"TERM", syscall.SIGTERM}, {"USR1", syscall.SIGUSR1}, {"USR2", syscall.SIGUSR2}}
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			ownMountTable(t)
			mountsBefore := mountTable(t)
			b := sandboxtest.NewBox(t, backend)
			for _, s := range sigs {
				marker := "agentbox-sig-" + s.name + "-" + filepath.Base(b.Home)
				cmd := b.Command(b.Repo, []string{"--disk-tmp", "--no-git-save", "--no-record"},
					sandboxtest.Leftovers(marker, 1)+"kill -"+s.name+" $$")
				res := make(chan sandboxtest.Result, 1)
				if err := sandboxtest.StartAndCollect(cmd, res); err != nil {
					t.Fatal(err)
				}
				pid := cmd.Process.Pid
				r := <-res
				if want := 128 + int(s.num); r.Code != want {
					t.Errorf("SIG%s: exit %d, want %d\n%s", s.name, r.Code, want, r)
				}
				if !sandboxtest.WaitForUpTo(sandboxtest.GoneBound, func() bool { return len(sandboxtest.Pgrep(marker)) == 0 }) {
					t.Errorf("SIG%s: sandboxed process left: %v", s.name, sandboxtest.Pgrep(marker))
				}
				if d := diskTmpDirs(b.Home); len(d) != 0 {
					t.Errorf("SIG%s: --disk-tmp dir left: %v", s.name, d)
				}
				if d := guardDirs(pid); len(d) != 0 {
					t.Errorf("SIG%s: push-guard staging dir left: %v", s.name, d)
				}
			}
			if after := mountTable(t); after != mountsBefore {
				t.Errorf("the launching side's mount table changed:\nbefore:\n%s\nafter:\n%s", mountsBefore, after)
			}
		})
	}
}

// TestDiskFullWhileSnapshotting: the snapshot's directory is a tiny tmpfs. The
// launch is refused with 125, nothing (no record, no blob) is left in the store, the
// command never runs, the repository is untouched.
func TestDiskFullWhileSnapshotting(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root to mount a small tmpfs")
	}
	u := testenv.TestUser(t)
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			// Incompressible data in the Git metadata, larger than the tmpfs.
			blob := make([]byte, 256<<10)
			_, _ = rand.Read(blob)
			if err := os.WriteFile(filepath.Join(b.Repo, ".git/objects/big"), blob, 0o644); err != nil {
				t.Fatal(err)
			}
			testenv.Chown(t, b.Repo)
			full := testenv.Dir(t, "full")
			opts := fmt.Sprintf("size=64k,mode=0700,uid=%d,gid=%d", u.UID, u.GID)
			if err := syscall.Mount("tmpfs", full, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
				t.Fatalf("mount tmpfs: %v", err)
			}
			defer syscall.Unmount(full, syscall.MNT_DETACH)
			before := treeSums(t, b.Repo)
			marker := filepath.Join(b.Repo, "ran")
			r := sandboxtest.Run(b.Command(b.Repo, []string{"--git-save-dir", full, "--no-record"}, "touch "+marker))
			lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
			if r.Code != 125 || len(lines) != 1 || !strings.Contains(r.Stderr, "space") {
				t.Errorf("disk full: want 125 and one line naming the lack of space, got %s", r)
			}
			if ents, _ := os.ReadDir(full); len(ents) != 0 {
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
				}
				t.Errorf("left in the full snapshot dir: %v", names)
			}
			if sandboxtest.Exists(marker) {
				t.Error("the command ran although the snapshot failed")
			}
			if after := treeSums(t, b.Repo); after != before {
				t.Errorf("repository changed by a refused launch:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// treeSums is one line per path below root: path and checksum.
func treeSums(t *testing.T, root string) string {
	t.Helper()
	var lines []string
	_ = filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err == nil {
			lines = append(lines, p+" "+checksum(p))
		}
		return nil
	})
	return strings.Join(lines, "\n")
}
