// Command vminit is the /init of a kmatrix VM: PID 1 of a throw-away Linux booted
// from an initramfs. It prepares the system the way a host distribution would
// (proc, sys, devtmpfs, tmpfs /tmp and /run, cgroup2, shared mount propagation),
// loads the modules (overlay, a virtual GPU's driver), then runs `agentbox doctor
// --json` and each test binary as an unprivileged user, printing marker lines
// (kmatrix/vmproto) around their output on the console, and powers the VM off. It must be built with
// CGO_ENABLED=0: the initramfs has no C library for it.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/kmatrix/vmproto"
	"golang.org/x/sys/unix"
)

func main() {
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "vminit: this is the init of a kmatrix VM, not a program to run")
		os.Exit(2)
	}
	// Whatever happens, the VM powers off: a panicking PID 1 would leave the kernel
	// waiting, and the host would only see its timeout.
	defer powerOff()
	defer func() {
		if r := recover(); r != nil {
			mark(vmproto.Error, fmt.Sprintf("vminit panic: %v", r))
		}
	}()
	if err := run(); err != nil {
		mark(vmproto.Error, err.Error())
		return
	}
	mark(vmproto.Done)
}

func run() error {
	if err := switchRoot(); err != nil {
		return fmt.Errorf("switch root: %w", err)
	}
	if err := mountSystem(); err != nil {
		return err
	}
	mark(vmproto.Kernel, release())
	b, err := os.ReadFile(vmproto.ConfigPath)
	if err != nil {
		return err
	}
	var cfg vmproto.Config
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("%s: %w", vmproto.ConfigPath, err)
	}
	if err := os.MkdirAll(cfg.User.Home, 0o755); err != nil {
		return err
	}
	if err := os.Chown(cfg.User.Home, cfg.User.UID, cfg.User.GID); err != nil {
		return fmt.Errorf("chown %s: %w", cfg.User.Home, err)
	}
	for _, m := range cfg.Modules {
		if err := loadModule(m); err != nil {
			// Not fatal: the probes then report the feature missing, which is the
			// truth about this VM.
			mark(vmproto.Error, fmt.Sprintf("load module %s: %v", m.Name, err))
		}
	}
	if cfg.DelegateCgroup {
		if err := delegateCgroup(cfg.User); err != nil {
			return fmt.Errorf("delegate a cgroup: %w", err)
		}
	}
	if err := openRenderNodes(); err != nil {
		mark(vmproto.Error, err.Error())
	}
	if len(cfg.Doctor) > 0 {
		runAsUser(cfg, vmproto.Doctor, cfg.Doctor, 120*time.Second)
	}
	for _, t := range cfg.Tests {
		argv := append([]string{t.Path, "-test.v", "-test.count=1", "-test.timeout=" + strconv.Itoa(t.Seconds) + "s"}, t.Args...)
		runAsUser(cfg, t.Name, argv, time.Duration(t.Seconds+15)*time.Second)
	}
	return nil
}

// switchRoot moves the initramfs onto a mount of its own. The initial rootfs cannot
// be pivot_root'ed away from, and sandboxes pivot_root; a bind mount of it, moved
// onto / and chrooted into (what switch_root does), can. The kernel also accepts
// user namespaces from this root, because it is the top mount at / rather than a
// chroot below it.
func switchRoot() error {
	if err := os.MkdirAll("/newroot", 0o755); err != nil {
		return err
	}
	if err := unix.Mount("/", "/newroot", "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind / on /newroot: %w", err)
	}
	if err := unix.Chdir("/newroot"); err != nil {
		return err
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move /newroot to /: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return err
	}
	return unix.Chdir("/")
}

// mountSystem mounts what systemd would, with shared propagation as on a systemd
// host, since that is what agentbox meets in the field.
func mountSystem() error {
	for _, m := range []struct {
		src, dst, fstype string
		flags            uintptr
		data             string
	}{
		{"proc", "/proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"sysfs", "/sys", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755"},
		{"devpts", "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "mode=0620,ptmxmode=0666"},
		{"tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
		{"tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
		{"tmpfs", "/run", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=0755"},
		{"cgroup2", "/sys/fs/cgroup", "cgroup2", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
	} {
		if err := os.MkdirAll(m.dst, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.src, m.dst, m.fstype, m.flags, m.data); err != nil {
			return fmt.Errorf("mount %s on %s: %w", m.fstype, m.dst, err)
		}
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("make / shared: %w", err)
	}
	return nil
}

// The delegated subtree and the leaf the user's programs start in, as systemd's
// user@UID.service and a scope below it.
const (
	userCgroup = "/sys/fs/cgroup/user"
	userLeaf   = userCgroup + "/session"
)

// delegateCgroup gives u a cgroup v2 subtree as systemd delegates one: the root
// hands the memory, pids and cpu controllers down, the subtree's directory and its
// cgroup.procs, cgroup.subtree_control and cgroup.threads belong to u, the
// controllers are enabled for its children (the user manager's work), and u's
// programs run in a leaf below it. The hierarchy gets nsdelegate, as systemd
// mounts it.
func delegateCgroup(u vmproto.User) error {
	if err := unix.Mount("", "/sys/fs/cgroup", "", unix.MS_REMOUNT, "nsdelegate"); err != nil {
		return fmt.Errorf("remount cgroup2 with nsdelegate: %w", err)
	}
	const ctl = "+memory +pids +cpu"
	if err := os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte(ctl), 0); err != nil {
		return err
	}
	for _, d := range []string{userCgroup, userLeaf} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
		for _, f := range []string{"", "cgroup.procs", "cgroup.subtree_control", "cgroup.threads"} {
			if err := os.Chown(d+"/"+f, u.UID, u.GID); err != nil {
				return err
			}
		}
		if d == userCgroup {
			if err := os.WriteFile(d+"/cgroup.subtree_control", []byte(ctl), 0); err != nil {
				return err
			}
		}
	}
	return nil
}

func loadModule(m vmproto.Module) error {
	f, err := os.Open(m.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	err = unix.FinitModule(int(f.Fd()), m.Params, 0)
	if errors.Is(err, unix.EEXIST) {
		return nil // built in, or loaded as a dependency
	}
	return err
}

// openRenderNodes gives every DRM render node mode 0666, as udev's default rules
// do on a distribution (devtmpfs makes them 0600, root's): a user may render
// without being root, and --gpu is tested as such a user.
func openRenderNodes() error {
	nodes, _ := filepath.Glob("/dev/dri/renderD*")
	for _, n := range nodes {
		if err := os.Chmod(n, 0o666); err != nil {
			return err
		}
	}
	return nil
}

// runAsUser runs argv as the unprivileged user, its output going straight to the
// console between markers, and kills it after limit.
func runAsUser(cfg vmproto.Config, name string, argv []string, limit time.Duration) {
	mark(vmproto.Begin, name)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = cfg.User.Home
	cmd.Env = cfg.Env
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uint32(cfg.User.UID), Gid: uint32(cfg.User.GID), Groups: []uint32{}},
		Setpgid:    true,
	}
	if cfg.DelegateCgroup {
		fd, err := unix.Open(userLeaf, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			fmt.Printf("\nvminit: open %s: %v\n", userLeaf, err)
		} else {
			defer unix.Close(fd)
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
		}
	}
	status := -1
	if err := cmd.Start(); err != nil {
		fmt.Printf("\nvminit: start %s: %v\n", argv[0], err)
	} else {
		timer := time.AfterFunc(limit, func() {
			fmt.Printf("\nvminit: %s still running after %s: killed\n", name, limit)
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		})
		err := cmd.Wait()
		timer.Stop()
		status = cmd.ProcessState.ExitCode()
		if err != nil && status < 0 {
			fmt.Printf("\nvminit: %s: %v\n", name, err)
		}
	}
	mark(vmproto.End, name, strconv.Itoa(status))
}

func mark(kind string, args ...string) {
	// A leading newline ends any line a program left unterminated, so the marker
	// always starts a line.
	fmt.Printf("\n%s%s\n", vmproto.Prefix, strings.Join(append([]string{kind}, args...), " "))
}

func release() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

func powerOff() {
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	// Reboot only returns on failure; PID 1 must not exit (the kernel would panic,
	// which with panic=-1 and qemu -no-reboot also ends the VM).
	select {}
}
