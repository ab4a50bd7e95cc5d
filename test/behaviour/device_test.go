package behaviour

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
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
	p := fmt.Sprintf("/dev/agentbox-test-%d-%s-%d", os.Getpid(), strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()), testDevices.Add(1))
	if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 5))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(p) })
	if err := os.Chmod(p, 0o666); err != nil { // past the umask
		t.Fatal(err)
	}
	return p
}

// testDevices numbers the nodes testDevice makes.
var testDevices atomic.Int64

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

// TestDeviceInside: a handed-in node keeps the host's mode and owner (an owner the
// sandbox does not map shows as nobody), --read-only leaves it writable (the flag is
// about the repository, and a read-only mount does not stop writes to a device),
// and the sandbox makes no device node of its own anywhere: mknod fails in /dev,
// /tmp, HOME and the repository.
func TestDeviceInside(t *testing.T) {
	dev := testDevice(t)
	owned := testDevice(t)
	u := testenv.TestUser(t)
	if err := os.Chown(owned, int(u.UID), int(u.GID)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(owned, 0o640); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("666:65534:65534\n640:%d:%d\nwritten\n", u.UID, u.GID)
	script := `stat -c %a:%u:%g ` + dev + ` ` + owned + ` && echo x > ` + dev + ` && echo written
for d in /dev /tmp "$HOME" .; do mknod "$d/agentbox-node" c 1 5 2>/dev/null && echo "made a node in $d"; done; true`
	for _, backend := range runners(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			runs := [][]string{{"--device", dev, "--device", owned}}
			if backend != sandboxtest.GoAPI { // the Go API's door takes no --read-only
				runs = append(runs, []string{"--device", dev, "--device", owned, "--read-only"})
			}
			for _, args := range runs {
				if out := b.ok(script, args...); out != want {
					t.Errorf("%v: inside %q, want %q", args, out, want)
				}
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
				refused(t, b.fixture().Sh(`echo RAN`, "--device", c.path), c.path, c.want)
			}
		})
	}
}

// refused checks that r is a refusal before the launch: exit 125 and one line
// naming path and saying want.
func refused(t *testing.T, r sandboxtest.Result, path, want string) {
	t.Helper()
	if r.Code != 125 || strings.Contains(r.Stdout, "RAN") || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 ||
		!strings.Contains(r.Stderr, want) || !strings.Contains(r.Stderr, path) {
		t.Errorf("--device %s: %s; want exit 125 and one line saying %q", path, r, want)
	}
}

// deviceDir makes a directory below /dev for a test's device nodes, removed with
// the test (device nodes need root).
func deviceDir(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, "making device nodes below /dev needs root")
	}
	dir := fmt.Sprintf("/dev/agentbox-test-%d-%s", os.Getpid(), strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// mknod makes the character device node major:minor at path, mode 0600 root's: the
// rule judges it without opening it, and no one else may.
func mknod(t *testing.T, path string, major, minor uint32) string {
	t.Helper()
	if err := unix.Mknod(path, unix.S_IFCHR|0o600, int(unix.Mkdev(major, minor))); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestDeviceRule: a device is judged by its number, not its name, through both
// doors and whatever the backend: terminals, input devices and injectors, raw
// memory, the kernel log, watchdogs, storage and network control devices and FUSE
// are refused before the launch with what they would give, also when named like a
// GPU and when reached through a symlink in /dev; a symlink in /dev to a block
// device is refused as one, and one to a node outside /dev, or through
// /proc/self/fd to one, as outside.
func TestDeviceRule(t *testing.T) {
	nodes := deviceDir(t)
	if err := os.Mkdir(filepath.Join(nodes, "dri"), 0o755); err != nil {
		t.Fatal(err)
	}
	fakeGPU := mknod(t, filepath.Join(nodes, "dri/renderD128"), 4, 63) // a virtual console
	gpuLink := filepath.Join(nodes, "card0")
	if err := os.Symlink(fakeGPU, gpuLink); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(testenv.Dir(t, "chroot"), "zero")
	mknod(t, outside, 1, 5)
	if err := os.Chmod(outside, 0o644); err != nil { // the launcher's stdin below
		t.Fatal(err)
	}
	outLink, fdLink := filepath.Join(nodes, "out"), filepath.Join(nodes, "stdin")
	if err := os.Symlink(outside, outLink); err != nil {
		t.Fatal(err)
	}
	disk, diskLink := filepath.Join(nodes, "disk"), filepath.Join(nodes, "disk-link")
	if err := unix.Mknod(disk, unix.S_IFBLK|0o600, int(unix.Mkdev(7, 0))); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(disk, diskLink); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/proc/self/fd/0", fdLink); err != nil {
		t.Fatal(err)
	}
	rows := []struct{ path, want string }{
		{fakeGPU, "is a terminal, device char 4:63"},
		{gpuLink, "leads to " + fakeGPU + ", which is a terminal"},
		{mknod(t, filepath.Join(nodes, "pts0"), 136, 0), "is a terminal, device char 136:0"},
		{mknod(t, filepath.Join(nodes, "vcs"), 7, 0), "screen memory"},
		{mknod(t, filepath.Join(nodes, "event0"), 13, 64), "keyboards"},
		{mknod(t, filepath.Join(nodes, "uinput"), 10, 223), "input injector"},
		{mknod(t, filepath.Join(nodes, "uhid"), 10, 239), "input injector"},
		{mknod(t, filepath.Join(nodes, "mem"), 1, 1), "physical memory"},
		{mknod(t, filepath.Join(nodes, "kmsg"), 1, 11), "forges a kernel message"},
		{mknod(t, filepath.Join(nodes, "watchdog"), 10, 130), "reboots the host"},
		{mknod(t, filepath.Join(nodes, "loop-control"), 10, 237), "block devices"},
		{mknod(t, filepath.Join(nodes, "tun"), 10, 200), "persistent tap"},
		{mknod(t, filepath.Join(nodes, "fuse"), 10, 229), "FUSE"},
		{mknod(t, filepath.Join(nodes, "hwrng"), 10, 183), "of no class agentbox hands in"},
		{diskLink, "is a block device (it leads to " + disk + ")"},
		{outLink, "lies outside /dev (it leads to " + outside + ")"},
		{fdLink, "lies outside /dev (it leads to " + outside + ")"},
	}
	for _, backend := range append(backends(t), sandboxtest.GoAPI) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			for _, c := range rows {
				cmd := b.fixture().Command(b.repo, []string{"--device", c.path}, `echo RAN`)
				stdin, err := os.Open(outside) // what /proc/self/fd/0 leads to in the launcher
				if err != nil {
					t.Fatal(err)
				}
				cmd.Stdin = stdin
				r := sandboxtest.Run(cmd)
				stdin.Close()
				refused(t, r, c.path, c.want)
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

// TestDeviceSwapped: while a flipper exchanges the handed-in node with a terminal, a
// FIFO or a regular file at its path, without pause, launch after launch on every
// backend and through both doors: each launch is refused (125, one line) or runs
// with the node the rule judged inside, never with what was swapped in — whether
// the swap came before the policy looked, between it and the launcher's last check,
// or between that and the backend's bind.
func TestDeviceSwapped(t *testing.T) {
	n := 8
	if v, err := strconv.Atoi(os.Getenv("AGENTBOX_RACE_LAUNCHES")); err == nil && v > 0 {
		n = v
	}
	nodes := deviceDir(t)
	dev, decoy := filepath.Join(nodes, "zero"), filepath.Join(nodes, "decoy")
	swaps := []struct {
		name string
		make func()
	}{
		{"terminal", func() { mknod(t, decoy, 4, 63) }},
		{"FIFO", func() {
			if err := unix.Mkfifo(decoy, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"regular file", func() { writeFile(t, decoy, "x") }},
	}
	for _, backend := range runners(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			for _, sw := range swaps {
				t.Run(sw.name, func(t *testing.T) {
					os.Remove(dev)
					os.Remove(decoy)
					mknod(t, dev, 1, 5)
					sw.make()
					stop, flips := flip(t, dev, decoy)
					ran, refusals := 0, map[string]int{}
					for i := 0; i < n; i++ {
						r := b.fixture().Sh(`stat -c '%F %t:%T' `+dev, "--device", dev)
						switch {
						case r.Code == 0 && r.Stdout == "character special file 1:5\n":
							ran++
						case r.Code == 125 && strings.Count(strings.TrimSpace(r.Stderr), "\n") == 0 && strings.Contains(r.Stderr, dev):
							refusals[refusalKind(r.Stderr)]++
						default:
							t.Errorf("launch %d: %s; want the node judged inside (character special file 1:5) or a one-line refusal", i, r)
						}
					}
					stop()
					t.Logf("%d launches: %d ran, refused %v; %d exchanges", n, ran, refusals, *flips)
				})
			}
		})
	}
}

// refusalKind says which check refused a launch in TestDeviceSwapped.
func refusalKind(stderr string) string {
	switch {
	case strings.Contains(stderr, "no longer the character device"):
		return "launcher's recheck"
	case strings.Contains(stderr, "not the file agentbox checked"):
		return "backend's bind"
	}
	return "policy"
}

// flip exchanges a and b (renameat2 RENAME_EXCHANGE) without pause until the
// returned stop is called, which leaves a where it was; flips counts exchanges.
func flip(t *testing.T, a, b string) (stop func(), flips *int) {
	t.Helper()
	n := new(int)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("exchange %s and %s: %v", a, b, err)
				return
			}
			*n++
		}
	}()
	return func() {
		close(quit)
		<-done
		if *n%2 == 1 {
			if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
				t.Fatal(err)
			}
		}
	}, n
}

// TestDeviceBoundByBwrap: bubblewrap binds a --dev-bind source by the path its
// descriptor leads to, so what it binds can be another node than the one agentbox
// checked (TestDeviceSwapped's race, made certain here by a bwrap wrapper that
// binds a FIFO instead): the init inside compares the bound node with the identity
// the launcher verified, and the launch is refused before the command runs.
func TestDeviceBoundByBwrap(t *testing.T) {
	if !slices.Contains(backends(t), "bwrap") {
		testenv.Skip(t, "no bubblewrap 0.12.0")
	}
	dev := testDevice(t)
	dir := testenv.Dir(t, "bwrap-wrapper")
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(dir, "bwrap")
	writeFile(t, wrapper, `#!/bin/sh
prev=
for a do
	shift
	case "$prev:$a" in --dev-bind:/proc/self/fd/*) a=`+fifo+`;; esac
	set -- "$@" "$a"
	prev=$a
done
exec `+sandboxtest.BwrapPath(t)+` "$@"
`)
	if err := os.Chmod(wrapper, 0o755); err != nil {
		t.Fatal(err)
	}
	b := newBox(t, "bwrap")
	cmd := b.fixture().Command(b.repo, []string{"--device", dev}, `stat -c %F `+dev)
	cmd.Env = append(cmd.Env, "AGENTBOX_BWRAP="+wrapper)
	r := sandboxtest.Run(cmd)
	if r.Code != 125 || r.Stdout != "" || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 ||
		!strings.Contains(r.Stderr, dev) || !strings.Contains(r.Stderr, "not the file agentbox checked") {
		t.Errorf("bwrap bound a FIFO for %s: %s; want the launch refused in one line", dev, r)
	}
}
