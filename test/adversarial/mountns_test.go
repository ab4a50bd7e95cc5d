package adversarial

import (
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
)

// ownMountTable gives the calling goroutine a mount namespace of its own, a private
// copy of the host's, when the tests run as root (as CI does). Tests of other
// packages, run beside this one, mount and unmount on the host; the copy does not
// see that, while everything the goroutine starts (launchers, the probe) runs in
// the copy, so a mount they leave shows in mountTable. The goroutine stays locked
// to its thread: the thread, and the namespace, end with it.
func ownMountTable(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		return // no other test can change the host's mounts either
	}
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		t.Fatalf("a mount namespace of the test's own: %v", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_PRIVATE|unix.MS_REC, ""); err != nil {
		t.Fatalf("make the test's mounts private: %v", err)
	}
}

// mountTable is the mount table of the calling goroutine's namespace (its thread's:
// /proc/self is the process's first thread).
func mountTable(t *testing.T) string {
	t.Helper()
	return sandboxtest.ReadFile(t, "/proc/thread-self/mountinfo")
}
