//go:build linux && !amd64

package nsinit

import (
	"fmt"
	"os"
	"syscall"

	"github.com/agentbox/agentbox/internal/termsafe"
	"github.com/agentbox/agentbox/internal/trustedexec"
)

// initMapsOwnIDs: here the launcher writes the init's id maps (os/exec does, from a
// full fork); the vfork start is amd64-only (vfork_linux_amd64.s).
const initMapsOwnIDs = false

// startInit starts binary as the init through os/exec: a fork rather than a vfork,
// because its child waits for the parent to write the id maps. It is cloned into the
// cgroup open at cgroup (-1: its caller's).
func startInit(exe initExe, env []string, flags uintptr, stdio Stdio, ctl *os.File, cgroup int) (*process, error) {
	files, closeNull, err := stdioFiles(stdio)
	if err != nil {
		return nil, err
	}
	defer closeNull()
	if exe, err = exe.above(append(files, ctl)); err != nil {
		return nil, err
	}
	defer exe.close()
	cmd := InitCommand(exe.path, controlFd, Stdio{Stdin: files[0], Stdout: files[1], Stderr: files[2]})
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
	err = cmd.Start()
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

// above returns e with its descriptor moved clear of files (trustedexec.Above),
// for a start through os/exec. The caller closes the result, and still closes e.
func (e initExe) above(files []*os.File) (initExe, error) {
	if e.file == nil {
		return e, nil
	}
	f, err := trustedexec.Above(e.file, files)
	if err != nil {
		return initExe{}, fmt.Errorf("init binary %s: %w", termsafe.Quote(e.name), err)
	}
	return initExe{path: trustedexec.ExecPath(int(f.Fd())), name: e.name, file: f}, nil
}
