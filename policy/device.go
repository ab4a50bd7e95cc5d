package policy

import (
	"github.com/agentbox/agentbox/internal/hostpath"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Device is one host character device handed into the sandbox's private /dev at
// its own path (--device, --gpu). The sandbox opens it as the host's node: its
// owner and mode still decide who may, and the driver behind it is reachable with
// all its ioctls (docs/security.md).
type Device struct {
	Path string // canonical path of the node, below /dev
	From string // what asked for it: "--device" or "--gpu"
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
// itself is handed in, at its own path), and none the sandbox's /dev has already.
func resolveDevices(p *Policy, opts Options, cwd string) error {
	seen := map[string]bool{}
	add := func(d Device) {
		if !seen[d.Path] {
			seen[d.Path] = true
			p.Devices = append(p.Devices, d)
		}
	}
	for _, arg := range opts.Devices {
		path, err := checkDevice(arg, cwd)
		if err != nil {
			return &Error{What: "--device", Path: arg, Reason: err.Error()}
		}
		add(Device{Path: path, From: "--device"})
	}
	if !opts.GPU {
		return nil
	}
	gpus := GPUNodes()
	if len(gpus) == 0 {
		return &Error{What: "--gpu", Reason: "this host has no GPU device node (" + strings.Join(GPUPatterns, ", ") + "); is the driver loaded? Leave --gpu out to run without one"}
	}
	for _, g := range gpus {
		add(Device{Path: g, From: "--gpu"})
	}
	return nil
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

// checkDevice resolves one --device argument to the canonical path of a character
// device below /dev, or says why it is not one.
func checkDevice(arg, cwd string) (string, error) {
	if arg == "" || strings.ContainsRune(arg, 0) {
		return "", deviceError("is not a path")
	}
	path := arg
	if !filepath.IsAbs(path) {
		path = filepath.Join(cwd, path)
	}
	canon, err := filepath.EvalSymlinks(filepath.Clean(path))
	if err != nil {
		return "", deviceError(reason(err))
	}
	via := ""
	if canon != filepath.Clean(path) {
		via = " (it leads to " + quote(canon) + ")"
	}
	fi, err := os.Lstat(canon)
	if err != nil {
		return "", deviceError(reason(err))
	}
	switch m := fi.Mode(); {
	case m&os.ModeDevice != 0 && m&os.ModeCharDevice == 0:
		return "", deviceError("is a block device" + via + "; only character devices can be handed in (a disk inside would bypass every file permission on it)")
	case m&os.ModeCharDevice == 0:
		return "", deviceError("is not a character device" + via + "; --device hands in device nodes like /dev/dri/renderD128")
	}
	if !hostpath.Within(canon, "/dev") {
		return "", deviceError("lies outside /dev" + via + "; only a node below /dev can be handed in")
	}
	if slices.Contains(sandboxDevNodes, canon) {
		return "", deviceError("is in the sandbox's /dev already" + via)
	}
	for _, d := range sandboxDevDirs {
		if hostpath.Within(canon, d) {
			return "", deviceError("lies in " + d + via + ", which the sandbox has its own of")
		}
	}
	return canon, nil
}
