// Package seccomp is the seccomp filter both backends put on the command: ioctl
// TIOCSTI and TIOCLINUX fail with EPERM (terminal injection), as do the fscrypt
// key ioctls and the kernel keyring calls (host state that is not a file), and
// prlimit64 on PID 1; nothing else is touched. The native init installs it with Install; the bwrap backend hands
// the serialised Program to bwrap (--add-seccomp-fd). One rule, one builder.
package seccomp

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The rules, each failing with EPERM:
//
//   - ioctl with request TIOCSTI (push bytes into the terminal's input queue) or
//     TIOCLINUX (its console twin), because kernels before 6.2, or with
//     dev.tty.legacy_tiocsti=1, let the command type into the caller's shell after
//     agentbox exits;
//   - ioctl FS_IOC_ADD_ENCRYPTION_KEY, FS_IOC_REMOVE_ENCRYPTION_KEY and
//     FS_IOC_REMOVE_ENCRYPTION_KEY_ALL_USERS: a filesystem's fscrypt keyring belongs
//     to the host, and removing the user's claim to a key locks the user's encrypted
//     directories on the host, through any file of that filesystem, read-only or not;
//   - add_key, request_key and keyctl: kernel keyrings are not namespaced, so the
//     command would reach the launching user's session and user keyrings (and, by
//     serial number, any key the user may use) and its changes would outlive the
//     session. Docker's default profile refuses the same three for the same reason.
//     A fresh session keyring instead (systemd's KeyringMode=private) would still
//     leave keys reachable by serial number; see docs/security.md;
//   - prlimit64 whose pid is 1: PID 1 of the sandbox runs as the command's uid and
//     gid, which is all prlimit64 asks of a caller, and its limits are weapons
//     against it: RLIMIT_CPU ends it with SIGKILL once it has used that much time
//     (reaping a storm of orphans is enough), RLIMIT_AS makes the Go init's next
//     allocation a fatal error (a traceback on the operator's terminal),
//     RLIMIT_NOFILE below 2 makes every poll(2) fail with EINVAL. setrlimit and
//     prlimit64 with pid 0 act on the caller only and stay allowed. pid_t is an
//     int: only the argument's low 32 bits name the process (docs/security.md,
//     "PID 1 and the audit").
//
// Everything else is allowed. The kernel compares an ioctl request as an unsigned
// int, so only the low 32 bits of the argument are tested: junk in the high bits is
// the same request (the bypass of CVE-2019-10063 in flatpak's filter).

// seccomp_data field offsets (linux/seccomp.h): nr, arch, then args[6] of 8 bytes
// each; args[1]'s low word is at 24 on little-endian machines, the only ones here.
const (
	seccompNr       = 0
	seccompArch     = 4
	seccompArg0Low  = 16
	seccompArg1Low  = 24
	ioctlTIOCSTI    = 0x5412
	ioctlTIOCLINUX  = 0x541C
	x32SyscallBit   = 0x40000000
	sockFilterBytes = 8 // struct sock_filter: u16 code, u8 jt, u8 jf, u32 k
)

// deniedRequests are the ioctl requests refused, on every ABI (the fscrypt argument
// structs hold no pointer or long, so their sizes, and the numbers, are the same for
// i386 and x32).
var deniedRequests = []uint32{
	ioctlTIOCSTI, ioctlTIOCLINUX,
	unix.FS_IOC_ADD_ENCRYPTION_KEY, unix.FS_IOC_REMOVE_ENCRYPTION_KEY, unix.FS_IOC_REMOVE_ENCRYPTION_KEY_ALL_USERS,
}

// abi is one system-call ABI a process of this architecture can use: its ioctl
// numbers, the numbers of the calls refused outright (add_key, request_key,
// keyctl), and its prlimit64 numbers.
type abi struct {
	arch    uint32
	ioctl   []uint32
	deny    []uint32
	prlimit []uint32
}

// abisFor lists the ABIs of GOARCH: on amd64 a process can also make i386 and x32
// system calls, and each must be covered or the filter is bypassed through them.
func abisFor(goarch string) ([]abi, error) {
	switch goarch {
	case "amd64":
		return []abi{
			{unix.AUDIT_ARCH_X86_64, []uint32{16, x32SyscallBit | 16, x32SyscallBit | 514},
				[]uint32{248, 249, 250, x32SyscallBit | 248, x32SyscallBit | 249, x32SyscallBit | 250},
				[]uint32{302, x32SyscallBit | 302}},
			{unix.AUDIT_ARCH_I386, []uint32{54}, []uint32{286, 287, 288}, []uint32{340}},
		}, nil
	case "arm64":
		return []abi{{unix.AUDIT_ARCH_AARCH64, []uint32{29}, []uint32{217, 218, 219}, []uint32{261}}}, nil
	}
	return nil, fmt.Errorf("no terminal-injection filter for %s", goarch)
}

// Program returns the filter for this machine, serialised as an array of struct
// sock_filter (what bwrap reads from --add-seccomp-fd).
func Program() ([]byte, error) {
	abis, err := abisFor(runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	return encodeFilter(buildFilter(abis)), nil
}

// Install loads the filter into the calling thread; a process forked from that
// thread inherits it. no_new_privs (or CAP_SYS_ADMIN) must already be set.
func Install() error {
	abis, err := abisFor(runtime.GOARCH)
	if err != nil {
		return err
	}
	prog := buildFilter(abis)
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	_, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return fmt.Errorf("install seccomp filter: %w", errno)
	}
	return nil
}

// buildFilter lays the program out as: one block per ABI, then the request check.
//
//	block:   ld arch; jeq ABI ? next : skip block; ld nr;
//	         jeq ioctl_i ? check : next …; jeq deny_j ? deny : next …;
//	         jeq prlimit_l ? pid1 : next …; ret ALLOW
//	unknown: ret ALLOW (a call of an ABI no block names)
//	check:   ld args[1] low; jeq request_k ? deny : next …; ret ALLOW
//	pid1:    ld args[0] low; jeq 1 ? deny : allow
//	deny:    ret ERRNO(EPERM)
//	allow:   ret ALLOW
func buildFilter(abis []abi) []unix.SockFilter {
	const (
		ld  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret = unix.BPF_RET | unix.BPF_K
	)
	allow := unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ALLOW}
	deny := unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)}

	// Where the check starts: after every block and the unknown-ABI ret ALLOW; the
	// pid1 check after the request check's load, compares and ret ALLOW; the deny
	// after the pid1 check's load and compare.
	check := 0
	for _, a := range abis {
		check += 4 + len(a.ioctl) + len(a.deny) + len(a.prlimit) // ld, jeq, ld, the jeqs, ret
	}
	check++
	pid1 := check + 1 + len(deniedRequests) + 1
	denyAt := pid1 + 2

	var prog []unix.SockFilter
	for _, a := range abis {
		blockLen := 4 + len(a.ioctl) + len(a.deny) + len(a.prlimit)
		prog = append(prog,
			unix.SockFilter{Code: ld, K: seccompArch},
			// Jump offsets count from the next instruction.
			unix.SockFilter{Code: jeq, K: a.arch, Jt: 0, Jf: uint8(blockLen - 2)},
			unix.SockFilter{Code: ld, K: seccompNr},
		)
		for _, nr := range a.ioctl {
			here := len(prog)
			prog = append(prog, unix.SockFilter{Code: jeq, K: nr, Jt: uint8(check - here - 1), Jf: 0})
		}
		for _, nr := range a.deny {
			here := len(prog)
			prog = append(prog, unix.SockFilter{Code: jeq, K: nr, Jt: uint8(denyAt - here - 1), Jf: 0})
		}
		for _, nr := range a.prlimit {
			here := len(prog)
			prog = append(prog, unix.SockFilter{Code: jeq, K: nr, Jt: uint8(pid1 - here - 1), Jf: 0})
		}
		prog = append(prog, allow)
	}
	prog = append(prog, allow) // an ABI this filter does not know
	prog = append(prog, unix.SockFilter{Code: ld, K: seccompArg1Low})
	for _, req := range deniedRequests {
		here := len(prog)
		prog = append(prog, unix.SockFilter{Code: jeq, K: req, Jt: uint8(denyAt - here - 1), Jf: 0})
	}
	prog = append(prog, allow,
		// pid1
		unix.SockFilter{Code: ld, K: seccompArg0Low},
		unix.SockFilter{Code: jeq, K: 1, Jt: 0, Jf: 1},
		deny, allow)
	return prog
}

// encodeFilter serialises a program as an array of struct sock_filter in the
// machine's byte order (little-endian on every architecture abisFor knows).
func encodeFilter(prog []unix.SockFilter) []byte {
	b := make([]byte, 0, len(prog)*sockFilterBytes)
	for _, f := range prog {
		b = binary.LittleEndian.AppendUint16(b, f.Code)
		b = append(b, f.Jt, f.Jf)
		b = binary.LittleEndian.AppendUint32(b, f.K)
	}
	return b
}
