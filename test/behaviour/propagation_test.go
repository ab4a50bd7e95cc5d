package behaviour

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestHostMountsStayOut (P1, issue 30): a mount the host makes while a session
// runs, below a shared mount point the sandbox sees (a USB stick under /media, an
// admin's sshfs), never appears inside, so it cannot be written there; neither does
// one the host makes below the repository. A host remount of a read-only filesystem
// to read-write leaves the sandbox's view of it read-only, and a host unmount of a
// mount stacked on another does not bare the lower one inside (bwrap's read-only
// pass, and the native one before Linux 5.12, leave a covered mount as it was).
// The host checks its filesystems after. It runs on every runner, as TestPromises does, but outside its
// table: the kernel matrix runs the table's P1 rows as an unprivileged user, and
// this one needs root to mount on the host.
func TestHostMountsStayOut(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root: mounts on the host during the session")
	}
	for _, backend := range cliRunners(t) {
		t.Run(backend, func(t *testing.T) { hostMountsStayOut(t, newBox(t, backend)) })
	}
}

func hostMountsStayOut(t *testing.T, b *box) {
	// The host here is a mount namespace of the test's own, a private copy of the
	// real one: the launcher started from this thread runs in it, and the real
	// host's mount table, which other tests count, never changes. The thread stays
	// locked, so it ends with the test, and the namespace with its mounts too.
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		t.Fatalf("unshare the mount namespace: %v", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_PRIVATE|unix.MS_REC, ""); err != nil {
		t.Fatalf("make the test's mounts private: %v", err)
	}
	// A shared mount point outside HOME, seen through the read-only root, with a
	// read-only tmpfs below it from the start; and HOME made one too, so that the
	// repository's bind (and the sandbox's clone of it) lies in a shared mount.
	shared := testenv.Dir(t, "shared")
	late, ro, repoLate := filepath.Join(shared, "late"), filepath.Join(shared, "ro"), filepath.Join(b.repo, "late")
	stacked := filepath.Join(shared, "stacked")
	for _, d := range []string{late, ro, repoLate, stacked} {
		mkdirUser(t, d)
	}
	makeShared(t, shared)
	makeShared(t, b.home)
	hostMount(t, ro, unix.MS_RDONLY)
	hostMount(t, stacked, 0)
	hostMount(t, stacked, 0)

	script := `touch .ready
		i=0; while [ ! -e .go ]; do sleep 0.05; i=$((i+1)); [ $i -lt 400 ] || exit 3; done
		for d in "$SHARED/late" "$SHARED/ro" "$REPO/late"; do
			grep -q " $d " /proc/self/mountinfo && echo "MOUNTED $d"
		done
		# The repository's own late/ is writable; what the host mounted there is not.
		echo x > "$REPO/late/f"
		for d in "$SHARED/late" "$SHARED/ro" "$SHARED/stacked"; do
			echo x > "$d/f" 2>/dev/null && echo "WROTE $d"
		done
		grep -q " $SHARED/late " /proc/self/mountinfo || echo late-absent
		exit 0`
	cmd := b.command(b.repo, nil, script)
	cmd.Env = append(cmd.Env, "SHARED="+shared)
	res := make(chan result, 1)
	if err := startAndCollect(cmd, res); err != nil {
		t.Fatal(err)
	}
	if !waitFor(func() bool { return exists(filepath.Join(b.repo, ".ready")) }) {
		t.Fatalf("the session did not start:\n%s", <-res)
	}
	// The host, as an administrator would: a new read-write filesystem below each
	// shared mount point, the read-only one remounted read-write, the upper of the
	// stacked ones unmounted.
	hostMount(t, late, 0)
	hostMount(t, repoLate, 0)
	if err := unix.Mount("", ro, "", unix.MS_REMOUNT, "mode=0777"); err != nil {
		t.Fatalf("remount %s read-write: %v", ro, err)
	}
	if err := unix.Unmount(stacked, 0); err != nil {
		t.Fatalf("unmount the upper mount at %s: %v", stacked, err)
	}
	writeFile(t, filepath.Join(b.repo, ".go"), "")
	r := <-res
	if r.code != 0 || strings.Contains(r.stdout, "WROTE") || strings.Contains(r.stdout, "MOUNTED "+late) ||
		strings.Contains(r.stdout, "MOUNTED "+repoLate) || !strings.Contains(r.stdout, "late-absent") {
		t.Errorf("host mounts of the session reached the sandbox:\n%s", r)
	}
	for _, d := range []string{late, ro, repoLate, stacked} {
		if exists(filepath.Join(d, "f")) {
			t.Errorf("the sandbox wrote %s/f on the host", d)
		}
	}
}

// makeShared makes dir a mount point of its own, in a peer group of its own
// (mount --bind dir dir; mount --make-shared dir), unmounted with everything
// below it when the test ends.
func makeShared(t *testing.T, dir string) {
	t.Helper()
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		t.Fatalf("make %s shared: %v", dir, err)
	}
}

// hostMount mounts a tmpfs everyone may write at dir, with flags.
func hostMount(t *testing.T, dir string, flags uintptr) {
	t.Helper()
	if err := unix.Mount("agentbox-test", dir, "tmpfs", flags, "mode=0777"); err != nil {
		t.Fatalf("mount a tmpfs at %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
}
