package policy

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// Which character devices may be handed in (--device, --gpu) is decided by what the
// node is, never by its name: a node can be called anything, and a symlink in /dev
// can lead anywhere. What it is is its major and minor numbers and the driver the
// kernel registered for that major (the names /proc/devices lists). Only the classes
// of devRules without a reason are handed in; every other device, known or not, is
// refused (docs/security.md, "Devices").

// devRule is one class of character device: the driver of the major, the minors it
// covers, and why it is refused (none: it is handed in).
type devRule struct {
	driver string   // /proc/devices' name for the major; a trailing "*" matches a prefix
	minors []uint32 // the minors the rule covers; none: every minor
	what   string   // what the device is, for messages
	why    string   // what it would give a process inside; "" when it is handed in
}

// Reasons shared by several rules.
const (
	whyTerminal = "a process inside could read another session's typing and write to its screen, and some escape sequences make a terminal type its answer into that session's input"
	whyInput    = "it reads the host's keyboards (every keystroke of the desktop session) or makes input devices that type into it"
	whyStorage  = "its raw commands reach a disk's blocks past every file permission, as a block device would"
	whyNet      = "it attaches to network interfaces: in the host's network namespace to a persistent tap the user owns, a path no session needs (in --offline's or --allow-net's it can make none)"
)

// devRules are the classes the rule knows. The handed-in ones come first; the
// refused ones are listed for their reasons, and anything missing is refused too.
var devRules = []devRule{
	{driver: "drm", what: "a GPU (DRM)"},
	{driver: "accel", what: "a compute accelerator (DRM accel)"},
	{driver: "nvidia*", what: "an NVIDIA GPU"},
	{driver: "kfd", what: "an AMD GPU's compute interface (ROCm)"},
	{driver: "alsa", what: "a sound device (ALSA)"},
	{driver: "sound", what: "a sound device (OSS)"},
	{driver: "video4linux", what: "a video device (camera, capture, codec)"},
	{driver: "media", what: "a media controller (camera pipelines)"},
	{driver: "ttyUSB", what: "a USB serial adapter"},
	{driver: "ttyACM", what: "a USB serial or modem device (ACM)"},
	{driver: "mem", minors: []uint32{3, 5, 7, 8, 9}, what: "null, zero, full, random or urandom"},
	{driver: "misc", minors: []uint32{232}, what: "KVM"},

	{driver: "mem", minors: []uint32{1, 2, 4}, what: "host memory or I/O ports (mem, kmem, port)", why: "it reads and writes the host's physical memory or hardware"},
	{driver: "mem", minors: []uint32{11}, what: "the kernel log (kmsg)", why: "a write forges a kernel message in the host's logs"},
	{driver: "tty", what: "a terminal", why: whyTerminal},
	{driver: "ttyS", what: "a terminal", why: whyTerminal},
	{driver: "/dev/vc/0", what: "a terminal", why: whyTerminal},
	{driver: "/dev/tty", what: "a terminal", why: whyTerminal},
	{driver: "/dev/console", what: "a terminal", why: whyTerminal},
	{driver: "/dev/ptmx", what: "a terminal", why: whyTerminal},
	{driver: "ptm", what: "a terminal", why: whyTerminal},
	{driver: "pts", what: "a terminal", why: whyTerminal},
	{driver: "vcs", what: "a virtual console's screen memory (vcs)", why: "it reads and rewrites what a console shows"},
	{driver: "input", what: "an input device", why: whyInput},
	{driver: "hidraw", what: "a raw HID device", why: whyInput},
	{driver: "misc", minors: []uint32{223, 239, 240}, what: "an input injector (uinput, uhid, userio)", why: whyInput},
	{driver: "usb_device", what: "a raw USB device", why: "it takes over any of the device's interfaces, a keyboard's too"},
	{driver: "usb", what: "a raw USB interface", why: "it reads and drives the device past its driver, a keyboard's too"},
	{driver: "watchdog", what: "a watchdog", why: "opening it arms the host's watchdog, which reboots the host when the sandbox ends"},
	{driver: "misc", minors: []uint32{130}, what: "a watchdog", why: "opening it arms the host's watchdog, which reboots the host when the sandbox ends"},
	{driver: "misc", minors: []uint32{237, 236, 234}, what: "a storage control device (loop-control, device-mapper, btrfs-control)", why: "it attaches and controls the host's block devices"},
	{driver: "misc", minors: []uint32{235}, what: "the automounter's control device (autofs)", why: "it drives the host's automounts"},
	{driver: "misc", minors: []uint32{231}, what: "the hibernation image (snapshot)", why: "it reads the host's memory"},
	{driver: "misc", minors: []uint32{228}, what: "the high-precision timer (hpet)", why: "it maps the host's timer hardware"},
	{driver: "misc", minors: []uint32{242}, what: "the radio switch (rfkill)", why: "it switches the host's radios off and on"},
	{driver: "misc", minors: []uint32{229}, what: "FUSE", why: "mounting one needs a capability the sandbox does not have, and fusermount's setuid does not work inside (no_new_privs)"},
	{driver: "misc", minors: []uint32{203}, what: "CUSE", why: "it makes character devices served from inside"},
	{driver: "misc", minors: []uint32{200}, what: "the tun/tap device", why: whyNet},
	{driver: "macvtap", what: "a macvtap interface", why: whyNet},
	{driver: "misc", minors: []uint32{238, 241}, what: "a vhost device (vhost-net, vhost-vsock)", why: "it runs a virtio back end in the host's kernel; a vsock one reaches host services no network namespace confines"},
	{driver: "vhost-vdpa", what: "a vhost device (vhost-vdpa)", why: "it runs a virtio back end in the host's kernel"},
	{driver: "misc", minors: []uint32{196}, what: "VFIO", why: "device passthrough gives DMA to the host's memory"},
	{driver: "vfio", what: "a VFIO group", why: "device passthrough gives DMA to the host's memory"},
	{driver: "misc", minors: []uint32{224}, what: "a TPM", why: "it reaches the host's TPM, its keys and measurements"},
	{driver: "tpm", what: "a TPM", why: "it reaches the host's TPM, its keys and measurements"},
	{driver: "tpmrm", what: "a TPM", why: "it reaches the host's TPM, its keys and measurements"},
	{driver: "misc", minors: []uint32{144}, what: "the firmware's NVRAM", why: "it rewrites the host's firmware settings"},
	{driver: "misc", minors: []uint32{184}, what: "the microcode loader", why: "it loads the host CPUs' microcode"},
	{driver: "cpu/msr", what: "a CPU's model-specific registers (msr)", why: "it reads and reprograms the host's CPUs"},
	{driver: "cpu/cpuid", what: "a CPU's identification (cpuid)", why: "it is the host CPUs' interface, of no use inside"},
	{driver: "fb", what: "a framebuffer", why: "it reads and draws the host's console screen"},
	{driver: "sg", what: "a SCSI generic device", why: whyStorage},
	{driver: "bsg", what: "a block SCSI generic device", why: whyStorage},
	{driver: "nvme-generic", what: "an NVMe namespace's character device", why: whyStorage},
	{driver: "nvme", what: "an NVMe controller", why: whyStorage},
	{driver: "raw", what: "a raw disk device", why: whyStorage},
	{driver: "mtd", what: "a flash device (mtd)", why: whyStorage},
	{driver: "st", what: "a SCSI tape", why: whyStorage},
	{driver: "ubi*", what: "a UBI flash volume", why: whyStorage},
	{driver: "ublk-char", what: "a userspace block device (ublk)", why: whyStorage},
	{driver: "dax", what: "a persistent-memory device (dax)", why: whyStorage},
}

// handedIn lists the classes that are handed in, for refusals.
const handedIn = "agentbox hands in GPUs, sound, video, USB serial adapters and KVM only"

// matches says whether the rule covers the driver name and the minor.
func (r devRule) matches(driver string, minor uint32) bool {
	if prefix, ok := strings.CutSuffix(r.driver, "*"); ok {
		if !strings.HasPrefix(driver, prefix) {
			return false
		}
	} else if driver != r.driver {
		return false
	}
	return len(r.minors) == 0 || slices.Contains(r.minors, minor)
}

// judgeDevice says what the character device major:minor is, or why it is not handed
// in. drivers maps a major to the names registered for it (charDrivers); a major
// several drivers share is handed in only if each of them is.
func judgeDevice(major, minor uint32, drivers map[uint32][]string) (string, error) {
	names := drivers[major]
	if len(names) == 0 {
		return "", deviceError(fmt.Sprintf("is device char %d:%d, for which no driver is registered (/proc/devices): it would open nothing; load its driver first", major, minor))
	}
	// The kernel lists the drivers of a major, not which minors each has.
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = quote(n)
	}
	num := fmt.Sprintf("device char %d:%d of driver %s", major, minor, strings.Join(quoted, " or "))
	what := ""
	for _, name := range names {
		i := slices.IndexFunc(devRules, func(r devRule) bool { return r.matches(name, minor) })
		if i < 0 {
			return "", deviceError(fmt.Sprintf("is %s, of no class agentbox hands in; %s: leave it out, or run what needs it outside agentbox", num, handedIn))
		}
		r := devRules[i]
		if r.why != "" {
			return "", deviceError(fmt.Sprintf("is %s, %s: %s; %s: leave it out", r.what, num, r.why, handedIn))
		}
		if what == "" {
			what = r.what
		}
	}
	return what, nil
}

// charDrivers reads /proc/devices' character section: each major with the names the
// drivers registered for it.
func charDrivers(r io.Reader) (map[uint32][]string, error) {
	out := map[uint32][]string{}
	in := false
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "Character devices:":
			in = true
			continue
		case strings.HasSuffix(line, "devices:"):
			in = false
			continue
		case !in || line == "":
			continue
		}
		num, name, ok := strings.Cut(line, " ")
		major, err := strconv.ParseUint(num, 10, 32)
		if !ok || err != nil || strings.TrimSpace(name) == "" {
			return nil, fmt.Errorf("unexpected line %q", line)
		}
		out[uint32(major)] = append(out[uint32(major)], strings.TrimSpace(name))
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no character devices listed")
	}
	return out, nil
}
