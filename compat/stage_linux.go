package compat

import (
	"fmt"
	"os"
	"path"
	"runtime"
	"slices"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/bwrapcheck"
	"github.com/agentbox/agentbox/internal/ucounts"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/overlay"
)

// IsStage reports whether this process is the stage. main asks first.
func IsStage() bool {
	return os.Getenv(envStage) == "1" && len(os.Args) > 0 && os.Args[0] == stageArgv0
}

// StageMain mounts the budget, if any, and executes bwrap; it returns only on
// failure, and then exits 125 having said why (the launcher adds that bwrap failed
// before the command started).
func StageMain() {
	// Ambient capabilities are per thread: they are dropped on this one, which then
	// executes bwrap.
	runtime.LockOSThread()
	err := stage(os.Args[1:])
	fmt.Fprintf(os.Stderr, "agentbox: bwrap backend: before bwrap: %v; no sandbox was started (--backend native builds it without this step)\n", err)
	os.Exit(125)
}

func stage(args []string) error {
	limits, args, err := parseLimits(args)
	if err != nil {
		return err
	}
	fd, b, bwrap, err := parseStage(args)
	if err != nil {
		return err
	}
	if err := lowerUserLimits(limits); err != nil {
		return err
	}
	if b != nil {
		if err := stageBudget(b); err != nil {
			return fmt.Errorf("tmpfs budget (--tmp-size): %w", err)
		}
	}
	if err := dropCaps(); err != nil {
		return err
	}
	os.Unsetenv(envStage)
	return execBwrap(fd, bwrap)
}

// lowerUserLimits puts the plan's user limits (mounts.UserLimit) on the stage's
// user namespace, which bwrap's, and every one nested in it, lies below (the
// kernel checks each level up, so neither bwrap's sandbox nor a namespace the
// command makes can take more), and its resource limits on the stage, whose bwrap
// and command inherit them. /proc/sys/user shows the writer's namespace; the stage
// may write it with CAP_SYS_RESOURCE there, an ambient capability of its own that
// dropCaps empties before bwrap.
func lowerUserLimits(limits []mounts.UserLimit) error {
	for _, l := range limits {
		if err := lowerUserLimit(l); err != nil {
			return fmt.Errorf("lower the user limit %s: %w", l.Name, err)
		}
	}
	return nil
}

func lowerUserLimit(l mounts.UserLimit) error {
	if l.IsRLimit() {
		r, err := ucounts.Resource(l)
		if err != nil {
			return err
		}
		return unix.Prlimit(0, r, &unix.Rlimit{Cur: uint64(l.Max), Max: uint64(l.Max)}, nil)
	}
	f, err := os.OpenFile("/proc/sys/user/"+l.Name, os.O_WRONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(strconv.FormatInt(l.Max, 10))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// stageBudget mounts the budget and what bwrap binds of it (budget.go).
func stageBudget(b *Budget) error {
	if err := mountHolder(len(b.Dirs)); err != nil {
		return err
	}
	if err := copyRoot(); err != nil {
		return err
	}
	if b.PtyMax > 0 {
		if err := unix.Mount("devpts", stagePts, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, b.PtsOptions()); err != nil {
			return fmt.Errorf("mount devpts (%s): %w", b.PtsOptions(), err)
		}
	}
	return mountBudget(b)
}

// execBwrap executes the file open at fd, the one bwrapcheck checked, through the
// descriptor: the path it was found at may name another file by now (a second
// session that can write there). A binary gets the descriptor closed at the exec,
// so that bwrap, which passes on what it inherits, hands no descriptor of it into
// the sandbox; a script keeps it, as its interpreter reads it by that name.
func execBwrap(fd int, argv []string) error {
	script, err := isScript(fd)
	if err != nil {
		return fmt.Errorf("read bwrap %s: %w", argv[0], err)
	}
	if !script {
		unix.CloseOnExec(fd)
	}
	return fmt.Errorf("execute bwrap %s: %w", argv[0], unix.Exec(bwrapcheck.ExecPath(fd), argv, os.Environ()))
}

// isScript reports whether the file open at fd (O_PATH) starts with "#!". It is
// reopened for reading through /proc: the launcher checked it is a regular file, so
// the open cannot block. A file this user may not read is no script it could run.
func isScript(fd int) (bool, error) {
	r, err := unix.Open(bwrapcheck.ExecPath(fd), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err == unix.EACCES {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(r)
	var head [2]byte
	n, err := unix.Pread(r, head[:], 0)
	if err != nil {
		return false, err
	}
	return n == 2 && string(head[:]) == "#!", nil
}

// dropCaps empties the ambient and inheritable sets, which would carry
// CAP_SYS_ADMIN across the exec (the inheritable one into a binary with file
// capabilities): an ordinary user's bwrap then starts with none, as bwrap wants when
// it is not setuid; a root launcher's keeps root's, as without the stage.
func dropCaps() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("drop ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("read capabilities: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("drop inheritable capabilities: %w", err)
	}
	return nil
}

// mountHolder covers StageDir, in this namespace only, with a small tmpfs holding
// the mount points root and 0..n-1, and budget, where the budget is mounted for a
// moment. StageDir is opened without following a symlink: the holder goes on the
// directory itself.
func mountHolder(n int) error {
	fd, err := unix.Open(StageDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", StageDir, err)
	}
	err = unix.Mount("tmpfs", "/proc/self/fd/"+strconv.Itoa(fd), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC,
		fmt.Sprintf("mode=0700,size=64k,nr_inodes=%d", n+8))
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("mount a tmpfs on %s: %w", StageDir, err)
	}
	names := []string{"root", "budget", "pts"}
	for i := range n {
		names = append(names, strconv.Itoa(i))
	}
	for _, name := range names {
		if err := unix.Mkdir(path.Join(StageDir, name), 0o700); err != nil {
			return fmt.Errorf("mkdir %s: %w", path.Join(StageDir, name), err)
		}
	}
	return nil
}

// copyRoot binds the namespace's tree, recursively, at stageRoot, and takes the
// holder's own copy out of it: what is left is "/" as it was before the stage mounted
// anything, for bwrap to bind as the sandbox's. Only mount(2) and umount2(2), which
// bwrap needs too: the new mount API may be missing where bwrap is the fallback.
func copyRoot() error {
	if err := unix.Mount("/", stageRoot, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind / at %s: %w", stageRoot, err)
	}
	if err := unix.Unmount(path.Join(stageRoot, StageDir), unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the copy's %s: %w", StageDir, err)
	}
	return nil
}

// mountBudget mounts the budget, makes its directories, binds each at StageDir/N,
// and detaches the budget's root: only the binds hold it then.
func mountBudget(b *Budget) error {
	at := path.Join(StageDir, "budget")
	if err := unix.Mount("tmpfs", at, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, b.Options()); err != nil {
		return fmt.Errorf("mount tmpfs (%s): %w", b.Options(), err)
	}
	for i, d := range b.Dirs {
		dir := path.Join(at, strconv.Itoa(i))
		mode := d.Mode
		if d.Overlay {
			mode = overlay.ScratchMode
		}
		if err := mkdirMode(dir, mode); err != nil {
			return err
		}
		if d.Overlay {
			if err := mkdirMode(path.Join(dir, overlay.UpperDir), d.Mode); err != nil {
				return err
			}
			if err := mkdirMode(path.Join(dir, overlay.WorkDir), overlay.ScratchMode); err != nil {
				return err
			}
		}
		if err := unix.Mount(dir, path.Join(StageDir, strconv.Itoa(i)), "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", dir, err)
		}
	}
	if err := unix.Unmount(at, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach %s: %w", at, err)
	}
	return nil
}

// mkdirMode makes dir with exactly mode: mkdir applies the umask.
func mkdirMode(dir string, mode uint32) error {
	if err := unix.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("mkdir %s: %w", dir, err)
	}
	if err := unix.Chmod(dir, mode); err != nil {
		return fmt.Errorf("chmod %s: %w", dir, err)
	}
	return nil
}

// stageCommand makes the command that would execute bwrap (args, env, attr) execute
// the stage instead, the running agentbox binary (selfExe: never what now lies at its
// path, as the stage runs outside any sandbox), with the descriptor bwrapFD of the
// checked bwrap binary and bwrap's command line after the budget's (b, nil: none).
func stageCommand(attr *syscall.SysProcAttr, args, env *[]string, bwrapFD int, b *Budget, limits []mounts.UserLimit) string {
	st := stageArgs(bwrapFD, b)
	*args = append(append(append(st[:1:1], limitArgs(limits)...), st[1:]...), *args...)
	*env = append(*env, envStage+"=1")
	if b != nil {
		attr.AmbientCaps = append(attr.AmbientCaps, unix.CAP_SYS_ADMIN)
	}
	if slices.ContainsFunc(limits, func(l mounts.UserLimit) bool { return !l.IsRLimit() }) {
		attr.AmbientCaps = append(attr.AmbientCaps, unix.CAP_SYS_RESOURCE)
	}
	return selfExe
}
