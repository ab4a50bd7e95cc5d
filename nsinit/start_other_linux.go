//go:build linux && !amd64

package nsinit

import (
	"os"
	"os/exec"
	"syscall"
)

// initMapsOwnIDs: here the launcher writes the init's id maps (os/exec does, from a
// full fork); the vfork start is amd64-only (vfork_linux_amd64.s).
const initMapsOwnIDs = false

// startInit starts binary as the init through os/exec: a fork rather than a vfork,
// because its child waits for the parent to write the id maps. It is cloned into the
// cgroup open at cgroup (-1: its caller's).
func startInit(binary string, env []string, flags uintptr, stdio Stdio, ctl *os.File, cgroup int) (*process, error) {
	cmd := InitCommand(binary, controlFd, stdio)
	cmd.Env = env
	cmd.ExtraFiles = []*os.File{ctl}
	uid, gid := os.Getuid(), os.Getgid()
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  flags,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
		Setpgid:     true,
		AmbientCaps: initCaps,
	}
	if cgroup >= 0 {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, cgroup
	}
	err := cmd.Start()
	if err != nil && cgroup >= 0 && noCloneIntoCgroup(err) {
		cmd = retryCommand(cmd)
		err = cmd.Start()
	}
	if err != nil {
		return nil, err
	}
	if !cmd.SysProcAttr.UseCgroupFD && cgroup >= 0 {
		if err := placeInCgroup(cgroup, cmd.Process.Pid); err != nil {
			_ = cmd.Process.Kill()
			_, _ = cmd.Process.Wait()
			return nil, err
		}
	}
	return osProcess(cmd.Process), nil
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
