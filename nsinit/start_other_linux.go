//go:build linux && !amd64

package nsinit

import (
	"os"
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
