package nsinit

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Securebits (linux/securebits.h). With NOROOT locked, uid 0 gains no capabilities
// on execve: agentbox started as root still runs the command without any.
const (
	secbitNoroot              = 1 << 0
	secbitNorootLocked        = 1 << 1
	secbitNoSetuidFixup       = 1 << 2
	secbitNoSetuidFixupLocked = 1 << 3
	secbitKeepCapsLocked      = 1 << 5
	secbitNoCapAmbientRaise   = 1 << 6
	secbitNoCapAmbientLocked  = 1 << 7
)

// dropPrivileges leaves the calling thread, and so the command forked from it, with
// no capability in any set, a bounding set that cannot regain one, no_new_privs, and
// a seccomp filter against terminal input injection. The thread must be locked.
func dropPrivileges() error {
	// Bounding set first: dropping from it needs CAP_SETPCAP, which goes below.
	for c := 0; c <= 63; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			if err == unix.EINVAL {
				break // past the kernel's last capability
			}
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && err != unix.EINVAL {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	bits := secbitNoroot | secbitNorootLocked | secbitNoSetuidFixup | secbitNoSetuidFixupLocked |
		secbitKeepCapsLocked | secbitNoCapAmbientRaise | secbitNoCapAmbientLocked
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, uintptr(bits), 0, 0, 0); err != nil {
		return fmt.Errorf("set securebits: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clear capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	return installSeccomp()
}

// The filter's job is narrow: TIOCSTI (push bytes into the terminal's input queue)
// and TIOCLINUX (its console twin) would let the command type into the caller's shell
// after agentbox exits; kernels before 6.2, or with dev.tty.legacy_tiocsti=1, allow it.
// ioctl's request is an unsigned int in the kernel, so only the low 32 bits of the
// argument are compared: a request with junk in the high bits is the same request
// (the bug of CVE-2019-10063 in flatpak's filter).
const (
	tiocsti   = 0x5412
	tioclinux = 0x541C

	offNr   = 0  // seccomp_data.nr
	offArch = 4  // seccomp_data.arch
	offArg1 = 24 // seccomp_data.args[1], low word on little-endian
)

// ioctlNumbers are ioctl's syscall numbers per audit arch that this filter knows;
// x32 shares AUDIT_ARCH_X86_64 with its own numbers (bit 30 set).
var ioctlNumbers = map[uint32][]uint32{
	unix.AUDIT_ARCH_X86_64:  {16, 0x40000000 | 514},
	unix.AUDIT_ARCH_I386:    {54},
	unix.AUDIT_ARCH_AARCH64: {29},
}

// tiocstiFilter builds the BPF program: for the running arch (and its compat arch on
// x86_64), an ioctl whose request is TIOCSTI or TIOCLINUX fails with EPERM; everything
// else is allowed.
func tiocstiFilter() []unix.SockFilter {
	const (
		ldW  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
		deny = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	)
	allow := uint32(unix.SECCOMP_RET_ALLOW)
	var archs []uint32
	switch runtime.GOARCH {
	case "amd64":
		archs = []uint32{unix.AUDIT_ARCH_X86_64, unix.AUDIT_ARCH_I386}
	case "arm64":
		archs = []uint32{unix.AUDIT_ARCH_AARCH64}
	case "386":
		archs = []uint32{unix.AUDIT_ARCH_I386}
	}
	// Layout per arch block: [ld arch][jeq arch, next block][ld nr][jeq nr_i → check]…[ja allow]
	// Built back to front is error-prone; instead each block ends with a jump to
	// the shared tail: [ld arg1][jeq TIOCSTI → deny][jeq TIOCLINUX → deny][allow][deny].
	var prog []unix.SockFilter
	type fix struct{ at int } // jump to the argument check, patched at the end
	var toCheck []fix
	var toAllow []int
	for _, a := range archs {
		nrs := ioctlNumbers[a]
		prog = append(prog, unix.SockFilter{Code: ldW, K: offArch})
		// if arch != a: skip this block (2 + len(nrs) + 1 instructions follow)
		prog = append(prog, unix.SockFilter{Code: jeq, K: a, Jt: 0, Jf: uint8(1 + len(nrs) + 1)})
		prog = append(prog, unix.SockFilter{Code: ldW, K: offNr})
		for _, nr := range nrs {
			toCheck = append(toCheck, fix{len(prog)})
			prog = append(prog, unix.SockFilter{Code: jeq, K: nr})
		}
		toAllow = append(toAllow, len(prog))
		prog = append(prog, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JA})
	}
	allowAt := len(prog)
	prog = append(prog, unix.SockFilter{Code: ret, K: allow})
	checkAt := len(prog)
	prog = append(prog,
		unix.SockFilter{Code: ldW, K: offArg1},
		unix.SockFilter{Code: jeq, K: tiocsti, Jt: 2, Jf: 0},
		unix.SockFilter{Code: jeq, K: tioclinux, Jt: 1, Jf: 0},
		unix.SockFilter{Code: ret, K: allow},
		unix.SockFilter{Code: ret, K: deny},
	)
	for _, f := range toCheck {
		prog[f.at].Jt = uint8(checkAt - f.at - 1)
	}
	for _, at := range toAllow {
		prog[at].K = uint32(allowAt - at - 1)
	}
	return prog
}

func installSeccomp() error {
	prog := tiocstiFilter()
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	_, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return fmt.Errorf("install seccomp filter: %w", errno)
	}
	return nil
}
