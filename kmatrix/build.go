package kmatrix

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/kmatrix/vmproto"
)

// HostPrograms are copied from the host into every VM, with their shared libraries:
// the commands agentbox's tests run inside and around the sandbox. Missing ones are
// left out.
var HostPrograms = []string{
	"sh", "bash", "true", "false", "echo", "printf", "cat", "ls", "mkdir", "rm",
	"rmdir", "touch", "chmod", "ln", "cp", "mv", "stat", "readlink", "realpath",
	"test", "id", "whoami", "env", "uname", "sleep", "kill", "setsid", "grep", "sed",
	"head", "tail", "wc", "tr", "cut", "sort", "tee", "dd", "dirname", "basename",
	"date", "mknod", "mount", "umount", "findmnt", "unshare", "nsenter", "ip", "git",
	"hostname", "awk", "pgrep", "ps", "find", "xargs", "perl", "prlimit",
}

// HostTrees are host directories copied when they exist, without their files larger
// than maxTreeFile: Git's templates, so that git init in a VM makes the same
// .git/hooks samples as on the host, and Git's exec path (its symlinked builtins,
// such as git-receive-pack, and its shell scripts; not the HTTP helpers, which
// need libraries nothing in the VMs uses).
var HostTrees = []string{"/usr/share/git-core/templates", "/usr/lib/git-core"}

const maxTreeFile = 64 << 10

// HostAliases are symlinks in the image that stand in for a large host file which
// is a copy of a program the image already has.
var HostAliases = map[string]string{"/usr/lib/git-core/git": "/usr/bin/git"}

// HostExtras are host files copied to the same path when they exist: the bwrap
// builds scripts/setup-test-env.sh provides for the bwrap backend's tests.
var HostExtras = []string{
	"/var/cache/agentbox-test/bwrap-0.12.0/bin/bwrap",
	"/var/cache/agentbox-test/bwrap-0.8.0/usr/bin/bwrap",
}

// The unprivileged account inside the VMs.
var vmUser = vmproto.User{Name: "agentbox-test", UID: 1000, GID: 1000, Home: "/home/agentbox-test"}

const vmAgentbox = "/usr/local/bin/agentbox"

type builtBinaries struct {
	Init     string
	Agentbox string
	Tests    map[string]string // TestPackage.Name → binary
}

// buildBinaries builds the init, agentbox and the test binaries, static
// (CGO_ENABLED=0): the VMs have no C library for them.
func buildBinaries(ctx context.Context, root, dir string, tests []TestPackage, logf func(string, ...any)) (builtBinaries, error) {
	b := builtBinaries{Init: filepath.Join(dir, "init"), Agentbox: filepath.Join(dir, "agentbox"), Tests: map[string]string{}}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return b, err
	}
	steps := [][]string{
		{"build", "-o", b.Init, "./cmd/kmatrix/vminit"},
		{"build", "-o", b.Agentbox, "./cmd/agentbox"},
	}
	for _, t := range tests {
		out := filepath.Join(dir, t.Name+".test")
		b.Tests[t.Name] = out
		steps = append(steps, []string{"test", "-c", "-o", out, t.Pkg})
	}
	for _, args := range steps {
		logf("go %s", strings.Join(args, " "))
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return b, fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return b, nil
}

// baseImage is what every VM shares: the init, agentbox, the tests, host programs,
// a passwd with the test user, and the directories a system has.
func baseImage(bins builtBinaries, tests []TestPackage) (*image, error) {
	im := newImage()
	im.host("/init", bins.Init, 0o755)
	im.host(vmAgentbox, bins.Agentbox, 0o755)
	for _, t := range tests {
		im.host("/kmatrix/tests/"+t.Name+".test", bins.Tests[t.Name], 0o755)
	}
	for _, d := range []string{"/proc", "/sys", "/dev", "/run", "/root", "/etc", "/usr/local/bin"} {
		im.dir(d, 0o755)
	}
	im.dir("/tmp", 0o1777)
	im.dir("/var/tmp", 0o1777)
	im.dir(vmUser.Home, 0o755)
	u := vmUser
	im.data("/etc/passwd", 0o644, fmt.Appendf(nil, "root:x:0:0:root:/root:/bin/sh\n%s:x:%d:%d::%s:/bin/sh\n", u.Name, u.UID, u.GID, u.Home))
	im.data("/etc/group", 0o644, fmt.Appendf(nil, "root:x:0:\n%s:x:%d:\n", u.Name, u.GID))
	im.data("/etc/hostname", 0o644, []byte("kmatrix\n"))
	for _, name := range HostPrograms {
		p, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		if err := im.hostProgram(p); err != nil {
			return nil, fmt.Errorf("host program %s: %w", name, err)
		}
	}
	for _, p := range HostTrees {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := im.hostTree(p, maxTreeFile); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	}
	for link, target := range HostAliases {
		if _, err := os.Stat(link); err == nil {
			im.symlink(link, target)
		}
	}
	for _, p := range HostExtras {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := im.hostProgram(p); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	}
	return im, nil
}

// vmConfig is the init's configuration for a cell, without the modules.
func vmConfig(c Cell, tests []TestPackage) vmproto.Config {
	u := vmUser
	cfg := vmproto.Config{
		User: u,
		Env: []string{
			"HOME=" + u.Home, "USER=" + u.Name, "LOGNAME=" + u.Name,
			"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
			"LANG=C.UTF-8", "SHELL=/bin/sh",
			"AGENTBOX_BINARY=" + vmAgentbox, // testenv uses it instead of building
			"AGENTBOX_KMATRIX=1",
			// A skip inside a VM fails the test (testenv.Skip), except the kernel
			// gate, which evaluate checks against doctor's measurement.
			"AGENTBOX_TEST_STRICT=1",
		},
		Doctor:         []string{vmAgentbox, "doctor", "--json"},
		DelegateCgroup: c.DelegateCgroup,
	}
	if c.DelegateCgroup {
		cfg.Env = append(cfg.Env, "AGENTBOX_KMATRIX_DELEGATED=1") // vmtest.EnvDelegated
	}
	if c.GPU {
		// The GPU test (kmatrix/vmtest) insists on a render node here.
		cfg.Env = append(cfg.Env, vmproto.EnvGPU+"=1")
	}
	for _, t := range tests {
		if t.NeedsSandbox && !c.NativeReady || c.Tests != nil && !slices.Contains(c.Tests, t.Name) {
			continue
		}
		cfg.Tests = append(cfg.Tests, vmproto.Test{Name: t.Name, Path: "/kmatrix/tests/" + t.Name + ".test", Seconds: t.Seconds, Args: t.Args})
	}
	return cfg
}

// cellImage adds a kernel's modules and the init's configuration to the base.
func cellImage(base *image, kf KernelFiles, cfg vmproto.Config) *image {
	im := newImage()
	for k, v := range base.files {
		im.files[k] = v
	}
	for k, v := range base.dirs {
		im.dirs[k] = v
	}
	for k, v := range base.symlinks {
		im.symlinks[k] = v
	}
	for _, m := range kf.Modules {
		im.host("/kmatrix/modules/"+m.Name+".ko", m.Path, 0o644)
	}
	b, _ := json.MarshalIndent(cfg, "", "  ")
	im.data(vmproto.ConfigPath, 0o644, b)
	return im
}

func checkTools() error {
	// zstd is looked for only when a module needs it.
	for _, t := range []string{"qemu-system-x86_64", "dpkg-deb", "xz", "go"} {
		if _, err := exec.LookPath(t); err != nil {
			return fmt.Errorf("kmatrix needs %s on PATH (scripts/setup-test-env.sh installs it): %w", t, err)
		}
	}
	return nil
}

// findModuleRoot returns the directory of the go.mod governing the working directory.
func findModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("run kmatrix inside the agentbox checkout (no go.mod found)")
	}
	return filepath.Dir(mod), nil
}
