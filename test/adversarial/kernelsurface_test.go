package adversarial

import (
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/seccomp"
	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// The kernel's surface past the mounts, from inside, on every way in: the raw init,
// the Go init, bubblewrap and the Go API. The probe tries what a command that wants
// out would try with system calls — calls newer than the filter, x32's numbers, the
// attribute calls on a read-only host file, PID 1's memory, and in a nested user and
// mount namespace (where the command holds every capability) each way the kernel
// offers to make a read-only bind writable again or to take a cover off — and each
// runner must refuse each one, with the same answer: a protection one runner gives
// and another does not is a hole.

// newerCallsTried is how many numbers past seccomp.LastKnownNr the probe calls.
const newerCallsTried = 40

func init() {
	probes["surface"] = probeSurface
	probes["surface-nested"] = probeSurfaceNested
}

// TestKernelSurfaceSameOnEveryRunner runs the probe on every runner, checks the host
// afterwards (runAttacksOn), and compares the runners' answers line by line.
func TestKernelSurfaceSameOnEveryRunner(t *testing.T) {
	var mu sync.Mutex
	answers := map[string][]string{}
	runners := append(sandboxtest.Backends(t), sandboxtest.NativeGo, sandboxtest.GoAPI)
	hostHandle := hostPidfsHandle(t)
	runAttacksOn(t, runners, []attack{{
		name:   "surface",
		script: `"$PROBE" surface "$VICTIM" "$REPO" ` + hostHandle + `; echo DONE`,
		check: func(t *testing.T, x *target, r sandboxtest.Result) {
			var lines []string
			for _, l := range strings.Split(r.Stdout, "\n") {
				if strings.HasPrefix(l, "refused ") || strings.HasPrefix(l, "ESCAPED ") {
					l = strings.ReplaceAll(strings.ReplaceAll(l, x.Victim, "$VICTIM"), x.Repo, "$REPO")
					lines = append(lines, l)
				}
			}
			if len(lines) < 20 {
				t.Fatalf("the probe made %d attempts:\n%s", len(lines), r)
			}
			mu.Lock()
			answers[x.Backend] = lines
			mu.Unlock()
		},
	}})
	ref := sandboxtest.Backends(t)[0]
	for _, runner := range runners[1:] {
		if a, b := answers[ref], answers[runner]; !slices.Equal(a, b) {
			t.Errorf("%s and %s answer differently:\n%s\n--- %s:\n%s", ref, runner, strings.Join(a, "\n"), runner, strings.Join(b, "\n"))
		}
	}
}

// hostPidfsHandle is the pidfs file handle (Linux 6.13+) of a process outside every
// sandbox, the test user's, as "TYPE:HEX", or "none" where the kernel makes none: a
// handle names a process by its pidfs inode, whatever PID namespace the opener is in.
func hostPidfsHandle(t *testing.T) string {
	u := testenv.TestUser(t)
	cmd := exec.Command("sleep", "300")
	if u.Root {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID}}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	fd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
	if err != nil {
		t.Fatalf("pidfd_open: %v", err)
	}
	defer unix.Close(fd)
	h, _, err := unix.NameToHandleAt(fd, "", unix.AT_EMPTY_PATH)
	if err != nil {
		t.Logf("no pidfs file handles on this kernel (%v): the row tries none", err)
		return "none"
	}
	// The control: outside, the handle opens the process.
	pfd, err := unix.OpenByHandleAt(fdPidfsRoot, h, unix.O_RDONLY)
	if err != nil {
		t.Fatalf("the host's own pidfs handle does not open outside: %v", err)
	}
	unix.Close(pfd)
	return fmt.Sprintf("%d:%x", h.Type(), h.Bytes())
}

// probeSurface: args VICTIM (a read-only host file the user owns), REPO and the
// pidfs handle of a process of the user's outside (hostPidfsHandle).
func probeSurface(args []string) int {
	victim, repo := args[0], args[1]
	// A host process of the same user, by its pidfs handle: a pidfd for it would
	// signal it past the PID namespace.
	if typ, hx, ok := strings.Cut(args[2], ":"); ok {
		var ht int32
		b, err := hex.DecodeString(hx)
		if _, serr := fmt.Sscan(typ, &ht); err == nil && serr == nil {
			fd, err := unix.OpenByHandleAt(fdPidfsRoot, unix.NewFileHandle(ht, b), unix.O_RDONLY)
			if err == nil {
				err = unix.PidfdSendSignal(fd, 0, nil, 0)
				unix.Close(fd)
			}
			report("a host process's pidfd by its handle", err)
		}
	} else {
		fmt.Println("refused a host process's pidfd by its handle: no pidfs handles here")
	}
	errno := func(e unix.Errno) error {
		if e == 0 {
			return nil
		}
		return e
	}
	// Calls a kernel newer than the filter has: the filter knows none of them.
	for nr := uintptr(seccomp.LastKnownNr + 1); nr <= seccomp.LastKnownNr+newerCallsTried; nr++ {
		_, _, e := unix.RawSyscall6(nr, 0, 0, 0, 0, 0, 0)
		if e != unix.ENOSYS {
			fmt.Printf("ESCAPED call %d, newer than the filter: %v\n", nr, errno(e))
		}
	}
	fmt.Printf("refused calls %d to %d: ENOSYS\n", seccomp.LastKnownNr+1, seccomp.LastKnownNr+newerCallsTried)
	if runtime.GOARCH == "amd64" {
		const x32 = 0x40000000
		_, _, e := unix.RawSyscall(x32|unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(0xfffffffd), 0)
		report("x32 keyctl", errno(e))
	} else {
		fmt.Println("refused x32 keyctl: no x32 here") // the same line count on every machine
	}
	// The attribute calls on a read-only host file the user owns.
	p, _ := unix.BytePtrFromString(victim)
	if f, err := os.Open(victim); err == nil {
		flags := uint32(0x40) // FS_NODUMP_FL: the owner may set it
		_, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.FS_IOC_SETFLAGS, uintptr(unsafe.Pointer(&flags)))
		report("FS_IOC_SETFLAGS on a read-only file", errno(e))
		f.Close()
	}
	var fa [24]byte // struct file_attr: fa_xflags first
	fa[0] = 0x80    // FS_XFLAG_NODUMP
	_, _, e := unix.Syscall6(469, uintptr(atFdcwd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&fa)), uintptr(len(fa)), 0, 0)
	report("file_setattr on a read-only file", errno(e))
	report("setxattr on a read-only file", unix.Setxattr(victim, "user.agentbox-pwned", []byte("1"), 0))
	_, _, e = unix.Syscall6(452, uintptr(atFdcwd), uintptr(unsafe.Pointer(p)), 0o777, 0, 0, 0) // fchmodat2
	report("fchmodat2 on a read-only file", errno(e))
	report("utimensat on a read-only file", unix.UtimesNano(victim, []unix.Timespec{{Sec: 1}, {Sec: 1}}))
	// PID 1: its memory, environment and root, and ptrace.
	for _, f := range []string{"/proc/1/mem", "/proc/1/environ"} {
		fd, err := unix.Open(f, unix.O_RDONLY, 0)
		if err == nil {
			unix.Close(fd)
		}
		report("open "+f, err)
	}
	_, err := os.ReadDir("/proc/1/root/")
	report("read /proc/1/root", err)
	if err := unix.PtraceAttach(1); err == nil {
		report("ptrace PID 1", nil)
		_ = unix.PtraceDetach(1)
	} else {
		report("ptrace PID 1", err)
	}
	// The nested user and mount namespace.
	cmd := exec.Command("/proc/self/exe", "surface-nested", victim, repo)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}
	if err := cmd.Run(); err != nil {
		fmt.Println("nested namespace:", err)
		return 1
	}
	report("write the read-only file", appendTo(victim))
	return 0
}

const (
	atFdcwd     = ^uintptr(99) // AT_FDCWD, -100, as a system-call argument
	fdPidfsRoot = -10002       // FD_PIDFS_ROOT: open_by_handle_at's mount for pidfs handles
)

func appendTo(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString("escaped\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// probeSurfaceNested runs as root of a nested user namespace, in a mount namespace
// of its own whose mounts it may change — but not the ones it was handed: each way of
// making the victim's read-only bind writable, then a write; each way of taking the
// cover off the repository's hooks, then a write.
func probeSurfaceNested(args []string) int {
	victim, repo := args[0], args[1]
	dir := filepath.Dir(victim)
	writeVictim := func(after string) { report("write the read-only file after "+after, appendTo(victim)) }
	report("remount / read-write", unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_BIND, ""))
	writeVictim("remount /")
	if err := unix.Mount(dir, dir, "", unix.MS_BIND|unix.MS_REC, ""); err == nil {
		report("remount a fresh bind of the file's directory read-write", unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND, ""))
		writeVictim("a fresh bind")
	} else {
		report("bind the file's directory", err)
	}
	clr := unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_RDONLY}
	report("mount_setattr read-write", unix.MountSetattr(unix.AT_FDCWD, dir, unix.AT_RECURSIVE, &clr))
	writeVictim("mount_setattr")
	if fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.AT_RECURSIVE); err == nil {
		report("mount_setattr read-write on a detached clone", unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &clr))
		report("write through a detached clone", writeAt(fd, filepath.Base(victim)))
		unix.Close(fd)
	} else {
		report("open_tree clone", err)
	}
	// open_tree_attr (467): the clone and its attributes in one call.
	p, _ := unix.BytePtrFromString(dir)
	fd, _, e := unix.Syscall6(467, atFdcwd, uintptr(unsafe.Pointer(p)), uintptr(unix.OPEN_TREE_CLONE|unix.AT_RECURSIVE), uintptr(unsafe.Pointer(&clr)), unsafe.Sizeof(clr), 0)
	if e == 0 {
		report("write through open_tree_attr's clone", writeAt(int(fd), filepath.Base(victim)))
		unix.Close(int(fd))
	} else {
		report("open_tree_attr read-write", e)
	}
	if fd, err := unix.Fspick(unix.AT_FDCWD, dir, 0); err == nil {
		_, _, e := unix.Syscall6(unix.SYS_FSCONFIG, uintptr(fd), unix.FSCONFIG_CMD_RECONFIGURE, 0, 0, 0, 0)
		if e == 0 {
			report("reconfigure the file's filesystem", nil)
		} else {
			report("reconfigure the file's filesystem", e)
		}
		unix.Close(fd)
	} else {
		report("fspick", err)
	}
	writeVictim("reconfigure")
	hooks := filepath.Join(repo, ".git", "hooks")
	report("unmount the hooks' cover", unix.Unmount(hooks, unix.MNT_DETACH))
	report("write a hook", os.WriteFile(filepath.Join(hooks, "pre-commit"), []byte("#!/bin/sh\necho escaped\n"), 0o755))
	return 0
}

func writeAt(dirfd int, name string) error {
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_APPEND, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	_, err = unix.Write(fd, []byte("escaped\n"))
	return err
}
