package nsinit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"

	"golang.org/x/sys/unix"
)

// cgroupFd is the descriptor of Options.Cgroup, -1 when there is none.
func cgroupFd(o Options) int {
	if o.Cgroup == nil {
		return -1
	}
	return int(o.Cgroup.Fd())
}

// noCloneIntoCgroup says that err is a kernel's answer to clone3 or to its
// CLONE_INTO_CGROUP that it does not have them (before Linux 5.3 and 5.7): the init
// is then cloned as before and moved into its cgroup (placeInCgroup) before it gets
// its plan, and so before it makes its cgroup namespace.
func noCloneIntoCgroup(err error) bool {
	return errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL)
}

// placeInCgroup moves process pid into the cgroup open at fd.
func placeInCgroup(fd, pid int) error {
	f, err := unix.Openat(fd, "cgroup.procs", unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == nil {
		_, err = unix.Write(f, []byte(strconv.Itoa(pid)))
		unix.Close(f)
	}
	if err != nil {
		return fmt.Errorf("move the init into its cgroup: %w", os.NewSyscallError("cgroup.procs", err))
	}
	return nil
}

// retryCommand is cmd again, to be started without CLONE_INTO_CGROUP: an exec.Cmd
// starts once.
func retryCommand(cmd *exec.Cmd) *exec.Cmd {
	again := exec.Command(cmd.Path)
	again.Args, again.Env, again.ExtraFiles = cmd.Args, cmd.Env, cmd.ExtraFiles
	again.Stdin, again.Stdout, again.Stderr = cmd.Stdin, cmd.Stdout, cmd.Stderr
	attr := *cmd.SysProcAttr
	attr.UseCgroupFD, attr.CgroupFD = false, 0
	again.SysProcAttr = &attr
	return again
}
