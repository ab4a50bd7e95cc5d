package behaviour

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// testDevice makes a character device below /dev that the test user may open and
// that no sandbox's /dev has: a node of the zero device (1, 5), mode 0666, removed
// with the test. The host has no such node of its own that an ordinary user may
// open (everything else below /dev is root's), and making one needs root.
func testDevice(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, "making a device node below /dev needs root")
	}
	p := fmt.Sprintf("/dev/agentbox-test-%d-%s", os.Getpid(), strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()))
	if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 5))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(p) })
	if err := os.Chmod(p, 0o666); err != nil { // past the umask
		t.Fatal(err)
	}
	return p
}

// readZeros reads three bytes of dev inside and says what it got.
func readZeros(dev string) string {
	return `x=$(head -c 3 ` + dev + ` 2>/dev/null | tr '\000' z); echo "${x:-fail}"`
}

// TestDevice: --device hands in one host character device at its own path, on every
// backend and through both doors; without it the path is not there. A symlink to
// the node hands in the node itself.
func TestDevice(t *testing.T) {
	dev := testDevice(t)
	for _, backend := range runners(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			if out := b.sh(readZeros(dev)).stdout; out != "fail\n" {
				t.Errorf("without --device, %s inside: %q, want it missing", dev, out)
			}
			if out := b.ok(readZeros(dev)+` && stat -c %t:%T `+dev, "--device", dev); out != "zzz\n1:5\n" {
				t.Errorf("with --device, %s inside: %q, want three zero bytes from device 1:5", dev, out)
			}
			link := filepath.Join(b.home, "dev-link")
			if err := os.Symlink(dev, link); err != nil {
				t.Fatal(err)
			}
			testenv.Chown(t, link)
			if out := b.ok(readZeros(dev), "--device", link); out != "zzz\n" {
				t.Errorf("--device through a symlink: %s inside: %q", dev, out)
			}
		})
	}
}

// TestDeviceRefused: anything but a character device below /dev is refused before
// the launch, with exit 125 and one line naming the path and why: a block device
// (a disk inside would bypass every file permission on it), through a symlink too,
// a regular file, a directory, a missing node, one the sandbox's /dev has already.
func TestDeviceRefused(t *testing.T) {
	block := ""
	for _, d := range []string{"/dev/loop0", "/dev/vda", "/dev/sda", "/dev/nvme0n1", "/dev/zram0"} {
		if fi, err := os.Stat(d); err == nil && fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0 {
			block = d
			break
		}
	}
	if block == "" {
		testenv.Skip(t, "no block device found below /dev")
	}
	for _, backend := range append(backends(t), sandboxtest.GoAPI) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			link := filepath.Join(b.home, "disk-link")
			if err := os.Symlink(block, link); err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(b.home, "plain")
			writeFile(t, file, "x")
			for _, c := range []struct{ path, want string }{
				{block, "is a block device"},
				{link, "is a block device (it leads to " + block + ")"},
				{file, "is not a character device"},
				{"/dev/net", "is not a character device"},
				{"/dev/agentbox-no-such-node", "does not exist"},
				{"/dev/null", "in the sandbox's /dev already"},
			} {
				r := b.fixture().Sh(`echo RAN`, "--device", c.path)
				if r.Code != 125 || strings.Contains(r.Stdout, "RAN") || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 ||
					!strings.Contains(r.Stderr, c.want) || !strings.Contains(r.Stderr, c.path) {
					t.Errorf("--device %s: %s; want exit 125 and one line saying %q", c.path, r, c.want)
				}
			}
		})
	}
}

// TestDeviceRepoFile: a repository's .agentbox.toml may drop handed-in devices,
// never add one or turn --gpu on.
func TestDeviceRepoFile(t *testing.T) {
	dev := testDevice(t)
	b := newBox(t, "native")
	writeFile(t, b.repo+"/.agentbox.toml", "device = []\n")
	if out := b.sh(readZeros(dev), "--device", dev).stdout; out != "fail\n" {
		t.Errorf("dropped by the repository's file, %s inside: %q", dev, out)
	}
	// A list the user did not give keeps nothing of it.
	writeFile(t, b.repo+"/.agentbox.toml", fmt.Sprintf("device = [%q]\n", dev))
	if out := b.sh(readZeros(dev)).stdout; out != "fail\n" {
		t.Errorf("added by the repository's file, %s inside: %q", dev, out)
	}
	writeFile(t, b.repo+"/.agentbox.toml", "gpu = true\n")
	r := b.fixture().Sh(`echo RAN`)
	if r.Code != 125 || strings.Contains(r.Stdout, "RAN") || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 || !strings.Contains(r.Stderr, "gpu") {
		t.Errorf("gpu = true in the repository's file: %s; want it refused", r)
	}
}

// TestDeviceNodesOutsideDev: a device node elsewhere on the host's filesystems (a
// chroot's or a container's /dev, left by root, mode 0666) does not open inside
// on any backend: the host's read-only view is nodev, as bwrap binds it, and a
// device reaches the sandbox only by --device, at its place in the private /dev.
func TestDeviceNodesOutsideDev(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "making a device node needs root")
	}
	node := filepath.Join(testenv.Dir(t, "chroot"), "zero") // not below /tmp, HOME or the repository
	if err := unix.Mknod(node, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 5))); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(node, 0o666); err != nil {
		t.Fatal(err)
	}
	for _, backend := range runners(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			if out := b.ok(`test -c ` + node + ` && echo there; ` + readZeros(node)); out != "there\nfail\n" {
				t.Errorf("a device node on the host's read-only view, inside: %q, want it there and not opening", out)
			}
		})
	}
}
