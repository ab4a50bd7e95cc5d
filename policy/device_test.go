package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// procDevices is a /proc/devices of a host with a GPU of each vendor, sound, a
// camera, USB serial adapters and the usual terminals, inputs and controls.
const procDevices = `Character devices:
  1 mem
  4 /dev/vc/0
  4 tty
  4 ttyS
  5 /dev/tty
  5 /dev/console
  5 /dev/ptmx
  7 vcs
 10 misc
 13 input
 14 sound
 21 sg
 29 fb
 81 video4linux
116 alsa
128 ptm
136 pts
137 pts
166 ttyACM
180 usb
188 ttyUSB
189 usb_device
195 nvidia-frontend
202 cpu/msr
226 drm
234 nvidia-uvm
235 kfd
236 media
237 nvidia-caps
238 hidraw
239 watchdog
240 bsg
241 nvme-generic
242 shared
242 alsa

Block devices:
  7 loop
  8 sd
`

func fixtureDrivers(t *testing.T) map[uint32][]string {
	t.Helper()
	d, err := charDrivers(strings.NewReader(procDevices))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestJudgeDevice: the rule goes by the device's number and its major's driver:
// the GPUs of every vendor, sound, video, USB serial adapters, KVM and the harmless
// memory devices are handed in; terminals, inputs, raw memory and storage, the
// kernel log, watchdogs and every control device are refused with what they would
// give; a driver the rule does not know, or none, is refused too.
func TestJudgeDevice(t *testing.T) {
	drivers := fixtureDrivers(t)
	for _, c := range []struct {
		major, minor uint32
		want         string // what it is when handed in, or what the refusal says
		ok           bool
	}{
		{226, 128, "GPU (DRM)", true},
		{226, 0, "GPU (DRM)", true},
		{195, 255, "NVIDIA", true},
		{234, 0, "NVIDIA", true},
		{237, 1, "NVIDIA", true},
		{235, 0, "ROCm", true},
		{116, 3, "sound", true},
		{14, 3, "sound", true},
		{81, 0, "video", true},
		{236, 0, "media", true},
		{188, 0, "USB serial", true},
		{166, 0, "ACM", true},
		{10, 232, "KVM", true},
		{1, 5, "zero", true},
		{1, 9, "urandom", true},

		{4, 1, "is a terminal", false},  // /dev/tty1
		{4, 64, "is a terminal", false}, // /dev/ttyS0: its major shares tty's
		{5, 0, "is a terminal", false},
		{5, 1, "is a terminal", false},
		{5, 2, "is a terminal", false},
		{136, 3, "is a terminal, device char 136:3 of driver pts:", false},
		{137, 0, "is a terminal", false},
		{128, 0, "is a terminal", false},
		{7, 1, "screen memory", false},
		{13, 64, "keyboards", false},
		{238, 0, "keyboards", false},
		{10, 223, "input injector", false},
		{10, 239, "input injector", false},
		{189, 1, "raw USB", false},
		{180, 96, "raw USB", false},
		{1, 1, "physical memory", false},
		{1, 2, "physical memory", false},
		{1, 4, "physical memory", false},
		{1, 11, "forges a kernel message", false},
		{10, 130, "reboots the host", false},
		{239, 0, "reboots the host", false},
		{10, 237, "block devices", false},
		{10, 236, "block devices", false},
		{10, 234, "block devices", false},
		{10, 235, "automounts", false},
		{10, 231, "host's memory", false},
		{10, 228, "timer", false},
		{10, 242, "radios", false},
		{10, 229, "FUSE", false},
		{10, 200, "persistent tap", false},
		{10, 238, "vhost", false},
		{10, 241, "vsock", false},
		{202, 0, "reprograms the host's CPUs", false},
		{21, 0, "past every file permission", false},
		{240, 0, "past every file permission", false},
		{241, 0, "past every file permission", false},
		{29, 0, "console screen", false},
		{10, 183, `is device char 10:183 of driver misc, of no class`, false}, // hwrng: not in the rule
		{242, 0, `of driver shared or alsa, of no class`, false},              // a major shared with a driver the rule does not know
		{250, 0, "no driver is registered", false},
	} {
		what, err := judgeDevice(c.major, c.minor, drivers)
		switch {
		case c.ok && (err != nil || !strings.Contains(what, c.want)):
			t.Errorf("%d:%d: %q, %v; want it handed in as %q", c.major, c.minor, what, err, c.want)
		case !c.ok && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%d:%d: %q, %v; want it refused saying %q", c.major, c.minor, what, err, c.want)
		case !c.ok && (!strings.Contains(err.Error(), fmt.Sprintf("%d:%d", c.major, c.minor)) || strings.Contains(err.Error(), "\n")):
			t.Errorf("%d:%d: %v; want one line naming the device's number", c.major, c.minor, err)
		}
	}
}

// TestCharDrivers: /proc/devices' character section only; anything unexpected in it
// is an error, not a guess.
func TestCharDrivers(t *testing.T) {
	d := fixtureDrivers(t)
	if got := d[4]; strings.Join(got, ",") != "/dev/vc/0,tty,ttyS" {
		t.Errorf("major 4: %q", got)
	}
	if _, ok := d[8]; ok {
		t.Error("a block major is listed as a character driver")
	}
	for _, bad := range []string{"", "Block devices:\n  8 sd\n", "Character devices:\nx mem\n", "Character devices:\n  1\n"} {
		if got, err := charDrivers(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: %v, want an error", bad, got)
		}
	}
	if _, err := hostDrivers(); err != nil {
		t.Errorf("this host's /proc/devices: %v", err)
	}
}

// devDir makes a directory below /dev for the test's nodes, removed with the test.
// Device nodes below /dev need root.
func devDir(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, "making device nodes below /dev needs root")
	}
	dir := fmt.Sprintf("/dev/agentbox-policy-test-%d", os.Getpid())
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// mknod makes a character device node at path with the number major:minor, mode
// 0600: the rule never opens it, so no one else may.
func mknod(t *testing.T, path string, major, minor uint32) {
	t.Helper()
	if err := unix.Mknod(path, unix.S_IFCHR|0o600, int(unix.Mkdev(major, minor))); err != nil {
		t.Fatal(err)
	}
}

// TestCheckDevice: only a character device below /dev, not one the sandbox has
// already, and of a class the rule hands in, is accepted; a symlink leads to its
// node, which is what is handed in, and the rule judges the node's number, not its
// name or the link's.
func TestCheckDevice(t *testing.T) {
	drivers := fixtureDrivers(t)
	nodes := devDir(t)
	zero := filepath.Join(nodes, "tty9") // named like a terminal, numbered as zero
	mknod(t, zero, 1, 5)
	if err := os.Mkdir(filepath.Join(nodes, "dri"), 0o755); err != nil {
		t.Fatal(err)
	}
	fakeGPU := filepath.Join(nodes, "dri/renderD128") // named like a GPU, numbered as a terminal
	mknod(t, fakeGPU, 4, 1)
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "l")
	if err := os.Symlink(zero, link); err != nil {
		t.Fatal(err)
	}
	gpuLink := filepath.Join(nodes, "card0") // a symlink in /dev to the terminal
	if err := os.Symlink(fakeGPU, gpuLink); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(dir, "zero") // a node outside /dev, and a link in /dev to it
	mknod(t, outside, 1, 5)
	outLink := filepath.Join(nodes, "out")
	if err := os.Symlink(outside, outLink); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ arg, want, err string }{
		{arg: zero, want: zero},
		{arg: link, want: zero},
		{arg: nodes + "/../" + filepath.Base(nodes) + "/tty9", want: zero},
		{arg: "l", want: zero}, // relative to the working directory
		{arg: fakeGPU, err: "is a terminal, device char 4:1 of driver /dev/vc/0 or tty or ttyS"},
		{arg: gpuLink, err: "leads to " + fakeGPU + ", which is a terminal"},
		{arg: "/dev/console", err: "is a terminal, device char 5:1"},
		{arg: outLink, err: "lies outside /dev (it leads to " + outside + ")"},
		{arg: file, err: "is not a character device"},
		{arg: "/dev", err: "is not a character device"},
		{arg: "/dev/no-such-node", err: "does not exist"},
		{arg: "/dev/null", err: "already"},
		{arg: "/dev/ptmx", err: "already"},
		{arg: "", err: "is not a path"},
		{arg: "/dev/x\x00", err: "is not a path"},
	} {
		got, err := checkDevice(c.arg, dir, drivers)
		switch {
		case c.err == "" && (err != nil || got.Path != c.want || got.RDev != unix.Mkdev(1, 5)):
			t.Errorf("%q: %+v, %v; want %q with its device number", c.arg, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: %+v, %v; want an error saying %q", c.arg, got, err, c.err)
		}
	}
	for _, d := range []string{"/dev/loop0", "/dev/vda", "/dev/sda", "/dev/zram0"} {
		if fi, err := os.Stat(d); err == nil && fi.Mode()&os.ModeCharDevice == 0 {
			if _, err := checkDevice(d, dir, drivers); err == nil || !strings.Contains(err.Error(), "block device") {
				t.Errorf("block device %s: %v, want it refused", d, err)
			}
		}
	}
}

// TestGPUDevices: --gpu's nodes pass the same rule: a node a GPU pattern names that
// is numbered as something else refuses --gpu, naming it.
func TestGPUDevices(t *testing.T) {
	drivers := fixtureDrivers(t)
	nodes := devDir(t)
	render, tty := filepath.Join(nodes, "renderD128"), filepath.Join(nodes, "nvidia0")
	mknod(t, render, 226, 128)
	mknod(t, tty, 4, 1)
	devs, err := gpuDevices([]string{render}, drivers)
	if err != nil || len(devs) != 1 || devs[0] != (Device{Path: render, From: "--gpu", RDev: unix.Mkdev(226, 128)}) {
		t.Errorf("a DRM render node: %+v, %v", devs, err)
	}
	devs, err = gpuDevices([]string{render, tty}, drivers)
	if err == nil || devs != nil || !strings.Contains(err.Error(), "--gpu "+tty+": is a terminal") {
		t.Errorf("a terminal named like an NVIDIA node: %+v, %v; want --gpu refused naming it", devs, err)
	}
}

// TestGPUNodes: whatever the host has, --gpu lists character devices only.
func TestGPUNodes(t *testing.T) {
	for _, n := range GPUNodes() {
		fi, err := os.Lstat(n)
		if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			t.Errorf("GPUNodes lists %s, not a character device (%v)", n, err)
		}
	}
}
