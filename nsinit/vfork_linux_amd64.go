package nsinit

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/eintr"
	"github.com/agentbox/agentbox/nsinit/program"
	"github.com/agentbox/agentbox/nsinit/protocol"
)

// Starting the init with vfork.
//
// os/exec clones with CLONE_VFORK|CLONE_VM unless the clone creates a user namespace:
// then it forks a full copy of the launcher (page tables, copy-on-write faults on both
// sides, the copy torn down again at exec), because its child waits for the parent to
// write the id maps, which a parent suspended by vfork never would. That fork is
// most of the time from clone to the init's execve.
//
// The init does not need the parent to write its maps: a process may map its own
// effective uid and gid in a user namespace it holds CAP_SETUID/CAP_SETGID in
// (user_namespaces(7)), so the init writes them itself (writeOwnIDMaps). With nothing
// to wait for, the clone can be a vfork. The child runs on the suspended parent's
// stack until execve, so it may only make raw system calls on data prepared before
// the clone — no allocation, no stack growth, no Go scheduler — as syscall's own
// forkAndExecInChild does; the runtime hooks below are the ones syscall uses for it.

// vforkClone is clone(flags) with the child on the caller's stack (vfork_linux_amd64.s).
//
//go:noescape
func vforkClone(flags uintptr) (pid uintptr, errno uintptr)

// vforkClone3 is vforkClone through clone3 (vfork_linux_amd64.s).
//
//go:noescape
func vforkClone3(args *cloneArgs) (pid uintptr, errno uintptr)

//go:linkname runtimeBeforeFork syscall.runtime_BeforeFork
func runtimeBeforeFork()

//go:linkname runtimeAfterFork syscall.runtime_AfterFork
func runtimeAfterFork()

//go:linkname runtimeAfterForkInChild syscall.runtime_AfterForkInChild
func runtimeAfterForkInChild()

// initMapsOwnIDs: the init writes its own id maps (see above), so the caller must
// ask it to (initEnv).
const initMapsOwnIDs = true

// initFds is how many descriptors the init starts with: stdin, stdout, stderr, and
// the control socket at controlFd.
const initFds = controlFd + 1

// vforkSpec is everything the vforked child uses, prepared before the clone.
type vforkSpec struct {
	flags   uintptr
	args    *cloneArgs // set: clone3 with these (into a cgroup), not clone with flags
	path    *byte
	argv    []*byte
	envv    []*byte
	fds     [initFds]int // the descriptors that become 0..initFds-1
	nextfd  int          // above every descriptor in fds and the error pipe
	errPipe int          // write end, close-on-exec: the child's errno, or EOF at exec
	ambient []uintptr    // capabilities raised as ambient before execve
	capHdr  unix.CapUserHeader
	capData [2]unix.CapUserData
	// walkFds: mark the inherited descriptors close-on-exec by a walk of procFd
	// (/proc/self/fd) into dents, not by close_range (CLOSE_RANGE_CLOEXEC needs
	// Linux 5.11; program.EnvFallbacks asks for the walk on any kernel).
	walkFds bool
	procFd  *byte
	dents   [4096]byte
	// Written together to errPipe by a child that failed: the errno and the step.
	childErr  uintptr
	childStep uintptr
}

// The steps of the vforked child a failure names (vforkSpec.childStep).
const (
	vforkStepExec = iota
	vforkStepSeal
)

// startInit starts binary as the init (argv0 protocol.InitArgv0, env), in the new
// namespaces flags, with stdio and ctl as its descriptors 0–2 and controlFd, its own
// process group, SIGKILL when the calling thread ends (the caller locks it), and
// initCaps as ambient capabilities; in the cgroup open at cgroup (-1: its caller's).
func startInit(exe initExe, env []string, flags uintptr, stdio Stdio, ctl *os.File, cgroup int) (*process, error) {
	files, closeNull, err := stdioFiles(stdio)
	if err != nil {
		return nil, err
	}
	defer closeNull()
	s := &vforkSpec{flags: flags | uintptr(unix.CLONE_VFORK|unix.CLONE_VM) | uintptr(unix.SIGCHLD)}
	if s.path, err = unix.BytePtrFromString(exe.path); err != nil {
		return nil, fmt.Errorf("init binary %q: %w", exe.name, err)
	}
	if s.argv, err = syscall.SlicePtrFromStrings([]string{protocol.InitArgv0}); err != nil {
		return nil, err
	}
	if s.envv, err = syscall.SlicePtrFromStrings(env); err != nil {
		return nil, fmt.Errorf("init environment: %w", err)
	}
	for i, f := range append(files, ctl) {
		s.fds[i] = int(f.Fd())
		s.nextfd = max(s.nextfd, s.fds[i]+1)
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, fmt.Errorf("error pipe: %w", err)
	}
	defer unix.Close(p[0])
	s.errPipe = p[1]
	// The lifted descriptors land above the held binary's too, which execve names.
	s.nextfd = max(s.nextfd, initFds, p[0]+1, p[1]+1, exe.fd()+1)
	s.ambient = initCaps
	s.capHdr.Version = unix.LINUX_CAPABILITY_VERSION_3 // capget fills capData in the child
	s.walkFds = os.Getenv(program.EnvFallbacks) != ""
	if s.procFd, err = unix.BytePtrFromString("/proc/self/fd"); err != nil {
		return nil, err
	}

	if cgroup >= 0 {
		s.args = cgroupArgs(s.flags, cgroup)
	}

	// No other fork may copy a descriptor that is not yet close-on-exec meanwhile.
	syscall.ForkLock.Lock()
	pid, errno := vforkInit(s)
	if errno != 0 && s.args != nil && noCloneIntoCgroup(errno) {
		s.args = nil
		pid, errno = vforkInit(s)
	}
	syscall.ForkLock.Unlock()
	unix.Close(p[1])
	if errno != 0 {
		return nil, fmt.Errorf("clone: %w", errno)
	}

	// execve closed the pipe: EOF. Otherwise the child wrote why it failed, and exited.
	var buf [16]byte
	n, _ := readFull(p[0], buf[:])
	if n > 0 {
		var ws unix.WaitStatus
		_, _ = eintr.Retry(func() (int, error) { return unix.Wait4(pid, &ws, 0, nil) })
		errno := *(*syscall.Errno)(unsafe.Pointer(&buf[0]))
		if *(*uintptr)(unsafe.Pointer(&buf[8])) == vforkStepSeal {
			return nil, fmt.Errorf("mark the launcher's inherited descriptors close-on-exec (close_range, or /proc/self/fd before Linux 5.11): %w", errno)
		}
		return nil, fmt.Errorf("exec %s: %w", exe.name, errno)
	}
	if cgroup >= 0 && s.args == nil {
		if err := placeInCgroup(cgroup, pid); err != nil {
			_ = unix.Kill(pid, unix.SIGKILL)
			var ws unix.WaitStatus
			_, _ = eintr.Retry(func() (int, error) { return unix.Wait4(pid, &ws, 0, nil) })
			return nil, err
		}
	}
	return childProcess(pid, nil), nil
}

func readFull(fd int, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := eintr.Retry(func() (int, error) { return unix.Read(fd, b[n:]) })
		if err != nil || m == 0 {
			return n, err
		}
		n += m
	}
	return n, nil
}

// vforkInit clones; the child sets itself up and execs the init, the parent returns
// the child's PID once it has.
//
//go:noinline
//go:nosplit
//go:norace
func vforkInit(s *vforkSpec) (int, syscall.Errno) {
	runtimeBeforeFork()
	var pid, errno uintptr
	if s.args != nil {
		pid, errno = vforkClone3(s.args)
	} else {
		pid, errno = vforkClone(s.flags)
	}
	if errno != 0 || pid != 0 {
		runtimeAfterFork()
		return int(pid), syscall.Errno(errno)
	}
	vforkChild(s) // never returns
	return 0, 0
}

// vforkChild is the child between clone and execve; see the comment at the top.
//
//go:nosplit
//go:norace
func vforkChild(s *vforkSpec) {
	var errno syscall.Errno
	var fds [initFds]int
	step := uintptr(vforkStepExec)
	runtimeAfterForkInChild()

	if _, _, errno = syscall.RawSyscall(unix.SYS_SETPGID, 0, 0, 0); errno != 0 {
		goto fail
	}
	// A launcher that died before this took effect is not noticed here (getppid
	// reads 0 in a new PID namespace, before and after): the init is, when it reads
	// its control socket, whose other end went with the launcher, and exits.
	if _, _, errno = syscall.RawSyscall6(unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0, 0); errno != 0 {
		goto fail
	}

	// Descriptors: first lift every source that sits below its target's range, so
	// that placing one never overwrites another; then dup each onto its number.
	fds = s.fds
	for i := 0; i < initFds; i++ {
		if fds[i] < initFds && fds[i] != i {
			if _, _, errno = syscall.RawSyscall(unix.SYS_DUP3, uintptr(fds[i]), uintptr(s.nextfd+i), unix.O_CLOEXEC); errno != 0 {
				goto fail
			}
			fds[i] = s.nextfd + i
		}
	}
	for i := 0; i < initFds; i++ {
		if fds[i] == i {
			if _, _, errno = syscall.RawSyscall(unix.SYS_FCNTL, uintptr(i), unix.F_SETFD, 0); errno != 0 {
				goto fail
			}
			continue
		}
		if _, _, errno = syscall.RawSyscall(unix.SYS_DUP3, uintptr(fds[i]), uintptr(i), 0); errno != 0 {
			goto fail
		}
	}
	// Nothing else reaches the init: a descriptor the launcher's own caller left
	// without close-on-exec (a shell's redirection, a Go API caller's open file)
	// would otherwise stay open in PID 1 of the sandbox for the whole session.
	if errno = vforkSealFds(s); errno != 0 {
		step = vforkStepSeal
		goto fail
	}

	// The child holds every capability in its new user namespace; the ones the init
	// needs survive execve as ambient capabilities (it runs as a non-root uid there).
	if _, _, errno = syscall.RawSyscall(unix.SYS_CAPGET, uintptr(unsafe.Pointer(&s.capHdr)), uintptr(unsafe.Pointer(&s.capData[0])), 0); errno != 0 {
		goto fail
	}
	for i := range s.ambient {
		c := s.ambient[i]
		s.capData[c/32].Inheritable |= 1 << (c % 32)
	}
	if _, _, errno = syscall.RawSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&s.capHdr)), uintptr(unsafe.Pointer(&s.capData[0])), 0); errno != 0 {
		goto fail
	}
	for i := range s.ambient {
		if _, _, errno = syscall.RawSyscall6(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, s.ambient[i], 0, 0, 0); errno != 0 {
			goto fail
		}
	}

	_, _, errno = syscall.RawSyscall(unix.SYS_EXECVE, uintptr(unsafe.Pointer(s.path)),
		uintptr(unsafe.Pointer(&s.argv[0])), uintptr(unsafe.Pointer(&s.envv[0])))
fail:
	s.childErr, s.childStep = uintptr(errno), step
	syscall.RawSyscall(unix.SYS_WRITE, uintptr(s.errPipe), uintptr(unsafe.Pointer(&s.childErr)), 2*unsafe.Sizeof(s.childErr))
	for {
		syscall.RawSyscall(unix.SYS_EXIT_GROUP, 253, 0, 0)
	}
}

// vforkSealFds marks every descriptor from initFds up close-on-exec, in the vforked
// child (raw system calls on s only). Where close_range cannot (before Linux 5.11,
// EINVAL; before 5.9, ENOSYS) it walks /proc/self/fd, and a walk that cannot read
// the list fails the start rather than let a descriptor through.
//
//go:nosplit
//go:norace
func vforkSealFds(s *vforkSpec) syscall.Errno {
	if !s.walkFds {
		_, _, errno := syscall.RawSyscall(unix.SYS_CLOSE_RANGE, initFds, ^uintptr(0)>>32, unix.CLOSE_RANGE_CLOEXEC)
		if errno != unix.EINVAL && errno != unix.ENOSYS {
			return errno
		}
	}
	cwd := unix.AT_FDCWD
	dir, _, errno := syscall.RawSyscall6(unix.SYS_OPENAT, uintptr(cwd), uintptr(unsafe.Pointer(s.procFd)), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0, 0, 0)
	if errno != 0 {
		return errno
	}
	for {
		n, _, errno := syscall.RawSyscall(unix.SYS_GETDENTS64, dir, uintptr(unsafe.Pointer(&s.dents[0])), uintptr(len(s.dents)))
		if errno != 0 || n == 0 {
			syscall.RawSyscall(unix.SYS_CLOSE, dir, 0, 0)
			return errno
		}
		// struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1), d_name.
		for off := uintptr(0); off+19 < n; {
			reclen := uintptr(s.dents[off+16]) | uintptr(s.dents[off+17])<<8
			if reclen == 0 || off+reclen > n {
				syscall.RawSyscall(unix.SYS_CLOSE, dir, 0, 0)
				return unix.EIO
			}
			fd, digits := uintptr(0), 0
			for i := off + 19; i < off+reclen && s.dents[i] != 0; i++ {
				c := s.dents[i]
				if c < '0' || c > '9' {
					digits = 0
					break
				}
				fd, digits = fd*10+uintptr(c-'0'), digits+1
			}
			if digits > 0 && fd >= initFds && fd != dir {
				// EBADF: not open (any more), nothing to keep from the init.
				if _, _, errno := syscall.RawSyscall(unix.SYS_FCNTL, fd, unix.F_SETFD, unix.FD_CLOEXEC); errno != 0 && errno != unix.EBADF {
					syscall.RawSyscall(unix.SYS_CLOSE, dir, 0, 0)
					return errno
				}
			}
			off += reclen
		}
	}
}

// fd is the held binary's descriptor, or -1.
func (e initExe) fd() int {
	if e.file == nil {
		return -1
	}
	return int(e.file.Fd())
}
