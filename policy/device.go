package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/agentbox/agentbox/internal/hostpath"
)

// Device is one host character device handed into the sandbox's private /dev at
// its own path (--device, --gpu). The sandbox opens it as the host's node: its
// owner and mode still decide who may, and the driver behind it is reachable with
// all its ioctls (docs/security.md).
type Device struct {
	Path string // canonical path of the node, below /dev
	From string // what asked for it: "--device" or "--gpu"
	// RDev is the device number the rule judged (devclass.go): the launch binds the
	// node only while it still has it (session/prepare). Zero: never judged, refused.
	RDev uint64
}

// sandboxDevNodes are the nodes every sandbox's /dev has already (mounts.Dev),
// and the directories it mounts of its own, where a host node has no place.
var (
	sandboxDevNodes = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx"}
	sandboxDevDirs  = []string{"/dev/pts", "/dev/shm"}
)

// GPUPatterns are the device nodes --gpu hands in, where the host has them:
// NVIDIA's (nvidia0…, nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset and
// the MIG capabilities below nvidia-caps), DRM's card and render nodes (Intel,
// AMD, virtio and every other Mesa driver), and AMD's compute interface (ROCm).
var GPUPatterns = []string{"/dev/nvidia*", "/dev/nvidia-caps/*", "/dev/dri/card*", "/dev/dri/renderD*", "/dev/kfd"}

// resolveDevices validates --device and expands --gpu: each is a character device
// below /dev, reached from what the user gave with symlinks resolved (the node
// itself is handed in, at its own path), none the sandbox's /dev has already, and
// one of the classes the device rule hands in (devclass.go).
func resolveDevices(p *Policy, opts Options, cwd string) error {
	if len(opts.Devices) == 0 && !opts.GPU {
		return nil
	}
	drivers, err := hostDrivers()
	if err != nil {
		what := "--device"
		if len(opts.Devices) == 0 {
			what = "--gpu"
		}
		return &Error{What: what, Reason: "cannot tell which driver a device node belongs to: " + err.Error()}
	}
	seen := map[string]bool{}
	add := func(d Device) {
		if !seen[d.Path] {
			seen[d.Path] = true
			p.Devices = append(p.Devices, d)
		}
	}
	for _, arg := range opts.Devices {
		d, err := checkDevice(arg, cwd, drivers)
		if err != nil {
			return &Error{What: "--device", Path: arg, Reason: err.Error()}
		}
		d.From = "--device"
		add(d)
	}
	if !opts.GPU {
		return nil
	}
	gpus := GPUNodes()
	if len(gpus) == 0 {
		return &Error{What: "--gpu", Reason: "this host has no GPU device node (" + strings.Join(GPUPatterns, ", ") + "); is the driver loaded? Leave --gpu out to run without one"}
	}
	devs, err := gpuDevices(gpus, drivers)
	if err != nil {
		return err
	}
	for _, d := range devs {
		add(d)
	}
	return nil
}

// gpuDevices judges the nodes --gpu found by the same rule as --device's: a node a
// GPU pattern names is judged by its number, and --gpu hands in all of them or none.
func gpuDevices(nodes []string, drivers map[uint32][]string) ([]Device, error) {
	var out []Device
	for _, g := range nodes {
		d, err := checkDevice(g, "/", drivers)
		if err != nil {
			return nil, &Error{What: "--gpu", Path: g, Reason: err.Error() + "; name the GPU's other nodes with --device instead"}
		}
		d.From = "--gpu"
		out = append(out, d)
	}
	return out, nil
}

// hostDrivers reads the host's /proc/devices (charDrivers).
func hostDrivers() (map[uint32][]string, error) {
	f, err := os.Open("/proc/devices")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	drivers, err := charDrivers(f)
	if err != nil {
		return nil, fmt.Errorf("/proc/devices: %w", err)
	}
	return drivers, nil
}

// GPUNodes lists the host's GPU device nodes (GPUPatterns): character devices
// only, each once, sorted; a symlink or anything else a pattern matches is left out.
func GPUNodes() []string {
	var out []string
	for _, pat := range GPUPatterns {
		matches, _ := filepath.Glob(pat)
		for _, m := range matches {
			if fi, err := os.Lstat(m); err == nil && fi.Mode()&os.ModeCharDevice != 0 && fi.Mode()&os.ModeDevice != 0 && !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	sort.Strings(out)
	return out
}

// deviceError is a --device refusal's reason.
type deviceError string

func (e deviceError) Error() string { return string(e) }

// checkDevice resolves one --device argument to a character device below /dev that
// the device rule hands in (judged by drivers, the host's /proc/devices), or says
// why it is not one.
func checkDevice(arg, cwd string, drivers map[uint32][]string) (Device, error) {
	if arg == "" || strings.ContainsRune(arg, 0) {
		return Device{}, deviceError("is not a path")
	}
	path := arg
	if !filepath.IsAbs(path) {
		path = filepath.Join(cwd, path)
	}
	canon, err := filepath.EvalSymlinks(filepath.Clean(path))
	if err != nil {
		return Device{}, deviceError(reason(err))
	}
	via := ""
	if canon != filepath.Clean(path) {
		via = " (it leads to " + quote(canon) + ")"
	}
	fi, err := os.Lstat(canon)
	if err != nil {
		return Device{}, deviceError(reason(err))
	}
	switch m := fi.Mode(); {
	case m&os.ModeDevice != 0 && m&os.ModeCharDevice == 0:
		return Device{}, deviceError("is a block device" + via + "; only character devices can be handed in (a disk inside would bypass every file permission on it)")
	case m&os.ModeCharDevice == 0:
		return Device{}, deviceError("is not a character device" + via + "; --device hands in device nodes like /dev/dri/renderD128")
	}
	if !hostpath.Within(canon, "/dev") {
		return Device{}, deviceError("lies outside /dev" + via + "; only a node below /dev can be handed in")
	}
	if slices.Contains(sandboxDevNodes, canon) {
		return Device{}, deviceError("is in the sandbox's /dev already" + via)
	}
	for _, d := range sandboxDevDirs {
		if hostpath.Within(canon, d) {
			return Device{}, deviceError("lies in " + d + via + ", which the sandbox has its own of")
		}
	}
	major, minor, rdev, ok := deviceNumber(fi)
	if !ok {
		return Device{}, deviceError("has no device number agentbox can read" + via)
	}
	if _, err := judgeDevice(major, minor, drivers); err != nil {
		if via != "" {
			return Device{}, deviceError("leads to " + quote(canon) + ", which " + err.Error())
		}
		return Device{}, err
	}
	return Device{Path: canon, RDev: rdev}, nil
}
