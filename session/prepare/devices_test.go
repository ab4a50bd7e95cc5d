package prepare

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/policy"
)

// TestDeviceIdentities: right before the launch, each handed-in device must still be
// the character device the policy's rule judged, by its number: a node of another
// number (a terminal renamed in at its path), a FIFO, a regular file or a symlink
// there refuses the launch, and so does a device the rule never judged. The one
// that passes gives the backends its identity.
func TestDeviceIdentities(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "making device nodes below /dev needs root")
	}
	dir := fmt.Sprintf("/dev/agentbox-prepare-test-%d", os.Getpid())
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	zero := unix.Mkdev(1, 5)
	node := func(name string, rdev uint64) string {
		p := filepath.Join(dir, name)
		if err := unix.Mknod(p, unix.S_IFCHR|0o600, int(rdev)); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dev := node("dev", zero)
	check := func(d policy.Device) (map[string]mounts.FileID, error) {
		ids := map[string]mounts.FileID{}
		err := deviceIdentities(&policy.Policy{Devices: []policy.Device{d}}, ids)
		return ids, err
	}
	ids, err := check(policy.Device{Path: dev, From: "--device", RDev: zero})
	var st unix.Stat_t
	if serr := unix.Stat(dev, &st); serr != nil {
		t.Fatal(serr)
	}
	if err != nil || ids[dev] != (mounts.FileID{Dev: st.Dev, Ino: st.Ino}) {
		t.Errorf("the judged node: %v, %v; want its identity", ids, err)
	}
	if _, err := check(policy.Device{Path: dev, From: "--device"}); err == nil || !strings.Contains(err.Error(), "not judged") {
		t.Errorf("a device the rule never judged: %v, want it refused", err)
	}

	swap := func(what string, make func(p string)) {
		t.Helper()
		p := filepath.Join(dir, "swap")
		os.Remove(p)
		make(p)
		if err := os.Rename(p, dev); err != nil {
			t.Fatal(err)
		}
		ids, err := check(policy.Device{Path: dev, From: "--device", RDev: zero})
		if err == nil || len(ids) != 0 || !strings.Contains(err.Error(), dev) {
			t.Errorf("%s renamed in at the device's path: %v, %v; want the launch refused", what, ids, err)
		}
	}
	swap("a terminal", func(string) { node("swap", unix.Mkdev(4, 1)) })
	swap("a FIFO", func(p string) {
		if err := unix.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
	})
	swap("a regular file", func(p string) {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	})
	swap("a symlink to a node of the judged number", func(p string) {
		if err := os.Symlink(node("other", zero), p); err != nil {
			t.Fatal(err)
		}
	})
}
