// Package seccomp is the seccomp filter both backends put on the command: ioctl
// TIOCSTI and TIOCLINUX fail with EPERM (terminal injection), as do TIOCSETD and
// the virtual console's requests (a terminal changed past the session), the fscrypt
// key ioctls and the kernel keyring calls (host state that is not a file),
// prlimit64 on PID 1, file leases (fcntl F_SETLEASE), clone3 (ENOSYS: its CLONE_INTO_CGROUP leaves the session's
// cgroup), io_setup (ENOSYS: the machine's AIO events are one pool) and huge pages
// from the hugetlb pool (ENOMEM, one pool for the machine); under a restricted network (Rules.ConfineSockets) sockets
// only of the families a network namespace confines. The native init installs it
// (nsinit/program); the bwrap backend hands the serialised Program to bwrap
// (--add-seccomp-fd). One rule, one builder.
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
//   - ioctl TIOCSETD (a line discipline), and every request of the virtual
//     console's two old-style ranges, 0x4B00–0x4BFF (KD*: keyboard mode, keymaps,
//     fonts, text or graphics) and 0x5600–0x56FF (VT_*: switching consoles): each
//     changes the caller's terminal for good, past the session, which agentbox
//     cannot put back — n_null's discipline discards everything the operator types,
//     a console left with its keyboard off or in graphics mode shows and takes
//     nothing — and the kernel checks no capability for them on one's own
//     controlling terminal (a TIOCSETD to a discipline not loaded also loads its
//     module, with dev.tty.ldisc_autoload=1). No sandbox has a console of its own,
//     nor needs a discipline other than the terminal's;
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
//     "PID 1 and the audit"). A process's limits are also its threads', and a Go
//     init's other threads have pids other than 1: so prlimit64 that sets a limit
//     (a new limit given) of any process but the caller (pid 0) fails too; reading
//     one stays allowed;
//
//   - fcntl F_SETLEASE: a write lease on a file of the repository (or a read lease on
//     one it may write) makes every other opener of the file — another session's
//     launch, its audit's and recorder's reads, the operator's Git — wait for
//     /proc/sys/fs/lease-break-time (45 s) per file, or fail where it opens with
//     O_NONBLOCK (a launch refused), while the session runs. Nothing a sandbox runs
//     needs a lease (file servers take them); F_GETLEASE stays allowed;
//
//   - clone3 fails with ENOSYS (what a kernel before 5.3 answers; glibc, Go and Rust
//     then use clone, as under Docker's default profile): its flags lie behind a
//     pointer the filter cannot read, and one of them, CLONE_INTO_CGROUP, starts the
//     child in any cgroup whose common ancestor with the caller's has a
//     cgroup.procs the user may write — by inode permission, which the read-only
//     /sys/fs/cgroup does not change — so out of the session's leaf and above its
//     --memory, --pids and --cpus limits, where cgroup2 is mounted without
//     nsdelegate (docs/security.md, "The cgroup tree"). clone carries no cgroup;
//
//   - io_setup fails with ENOSYS (what a kernel built without CONFIG_AIO answers;
//     libaio's users, databases and QEMU's aio=native, then fall back to threads,
//     as glibc's POSIX AIO always does): a Linux AIO context reserves its events
//     from /proc/sys/fs/aio-max-nr, one pool for the whole machine and every user
//     (65,536 by default), so one session that reserved them all made every other
//     user's io_setup fail with EAGAIN while it ran (a database that could not
//     start); no namespace or cgroup bounds it;
//
//   - huge pages from the hugetlb pool: mmap (mmap2) with MAP_HUGETLB and shmget
//     with SHM_HUGETLB fail with ENOMEM (what an empty pool answers, as on most
//     hosts), memfd_create with MFD_HUGETLB with ENOSYS (a kernel without
//     hugetlbfs), and i386's ipc(SHMGET) with SHM_HUGETLB as shmget; i386's old mmap,
//     whose flags lie behind a pointer, fails with ENOSYS (libcs use mmap2). The pool
//     (vm.nr_hugepages) is one for the whole machine, reserved by databases, DPDK
//     and VMs; no user namespace or memory cgroup counts its pages, so one session
//     took every page and even root's next mapping failed. Transparent huge pages
//     are not from the pool and stay allowed;
//
// With Rules.ConfineSockets (a new network namespace, docs/network.md):
//
//   - socket and socketpair succeed only for socketFamilies and fail with
//     EAFNOSUPPORT (what a kernel without the family answers) for every other:
//     a network namespace scopes those families, not the others (AF_VSOCK reaches
//     the hypervisor and the host's vsock services from any namespace);
//   - socketcall (i386 only) and io_uring_setup fail with ENOSYS: socketcall hides
//     the family behind a pointer a filter cannot read, and io_uring creates
//     sockets (IORING_OP_SOCKET) without any system call the filter sees.
//
// Everything else the filter knows is allowed. A system call it does not know fails
// with ENOSYS, what a kernel without the call answers, so that programs take their
// fallback: a call of an ABI the filter does not know (every ABI of amd64 and arm64 is
// listed, so none can slip past), and a call numbered past LastKnownNr, the newest
// call whose effects were reviewed (docs/security.md, "System calls newer than the
// filter"). The rules above are a list, and a list misses what came after it: a
// call a newer kernel adds is refused until it is looked at, as runc and Docker
// refuse calls newer than their profiles.
// The kernel compares an ioctl request as an unsigned int, so only the low 32 bits
// of the argument are tested: junk in the high bits is the same request (the bypass
// of CVE-2019-10063 in flatpak's filter); socket's family is an int, the same.

// Rules are the filter's rules that depend on the session; the zero value is what
// every session gets.
type Rules struct {
	// ConfineSockets (mounts.Plan.ConfineSockets): sockets only of socketFamilies;
	// socketcall and io_uring_setup refused.
	ConfineSockets bool
}

// socketFamilies are the address families a command may create sockets of under
// Rules.ConfineSockets: each is confined by the network namespace (AF_UNIX's path
// sockets by the file system and Landlock, its abstract ones by the namespace) and
// everyday programs need them: ip and ss speak netlink, ping and DHCP clients use
// packet sockets (which need CAP_NET_RAW in the namespace's owner anyway).
var socketFamilies = []uint32{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK, unix.AF_PACKET}

// seccomp_data field offsets (linux/seccomp.h): nr, arch, then args[6] of 8 bytes
// each; an argument's low word comes first on little-endian machines, the only ones here.
const (
	seccompNr       = 0
	seccompArch     = 4
	seccompArg0Low  = 16
	seccompArg1Low  = 24
	seccompArg2Low  = 32
	seccompArg2High = 36
	seccompArg3Low  = 40
	ipcCallMask     = 0xFFFF // ipc(2)'s call number; the high half is a version
	ipcShmget       = 23     // ipc(2)'s SHMGET
	shmHugeTLB      = 0x800  // SHM_HUGETLB (04000), the same on every ABI
	ioctlTIOCSTI    = 0x5412
	ioctlTIOCLINUX  = 0x541C
	ioctlTIOCSETD   = 0x5423
	ioctlRangeMask  = 0xFFFFFF00 // an old-style request's type byte and number
	ioctlKD         = 0x4B00     // KD*: the console's keyboard, fonts and mode
	ioctlVT         = 0x5600     // VT_*: virtual console switching
	x32SyscallBit   = 0x40000000
	x32LastOwn      = 547      // x32's own calls are 512 (rt_sigaction) to 547 (pwritev2)
	armPrivate      = 0x0f0000 // 32-bit Arm's private calls (cacheflush, set_tls, …)
	armLastPriv     = 0x0f07ff // the end of the range the kernel reserves for them
	sockFilterBytes = 8        // struct sock_filter: u16 code, u8 jt, u8 jf, u32 k
)

// deniedRequests are the ioctl requests refused, on every ABI (the fscrypt argument
// structs hold no pointer or long, so their sizes, and the numbers, are the same for
// i386 and x32). deniedRanges are refused whole: a request whose bits but the
// low byte (ioctlRangeMask) are one of them. Old-style requests carry no size or
// direction bits, so their numbers are the same on every ABI too.
var (
	deniedRanges   = []uint32{ioctlKD, ioctlVT}
	deniedRequests = []uint32{
		ioctlTIOCSTI, ioctlTIOCLINUX, ioctlTIOCSETD,
		unix.FS_IOC_ADD_ENCRYPTION_KEY, unix.FS_IOC_REMOVE_ENCRYPTION_KEY, unix.FS_IOC_REMOVE_ENCRYPTION_KEY_ALL_USERS,
	}
)

// abi is one system-call ABI a process of this architecture can use: its ioctl
// numbers, the numbers of the calls refused outright (add_key, request_key,
// keyctl), its prlimit64 numbers, its fcntl (and fcntl64) numbers, its clone3 and io_setup numbers,
// the calls that map huge pages (mmap or mmap2, memfd_create, shmget, i386's ipc and
// old mmap), and for Rules.ConfineSockets
// its socket and socketpair numbers and those refused with ENOSYS (socketcall,
// io_uring_setup).
type abi struct {
	arch    uint32
	known   []nrRange // the numbers that name a call the filter knows; any other is ENOSYS
	ioctl   []uint32
	deny    []uint32
	prlimit []uint32
	fcntl   []uint32
	clone3  []uint32
	aio     []uint32 // io_setup
	mmap    []uint32 // flags in the fourth argument
	memfd   []uint32 // memfd_create
	shmget  []uint32
	ipc     []uint32 // i386's multiplexer: the call first, shmget's flags fourth
	oldMmap []uint32 // i386's mmap: its arguments behind a pointer
	socket  []uint32
	noSys   []uint32
}

// LastKnownNr is the number of the newest system call the filter knows (reviewed in
// docs/security.md, "System calls newer than the filter"), file_setattr (Linux 6.17):
// every call numbered past it fails with ENOSYS. Since Linux 5.1 (424,
// pidfd_send_signal) a new call has this one number on every ABI. Raising it is a
// review of every call up to the new number.
const LastKnownNr = 469

// LastKnownRelease is the kernel release that added the call LastKnownNr names: a
// kernel newer than it may have calls the filter refuses with ENOSYS.
const LastKnownRelease = "6.17"

// NewerThanFilter reports whether a kernel release (uname -r: "7.2.13+deb14-amd64")
// is newer than LastKnownRelease, so that calls it added since fail inside with
// ENOSYS; a release it cannot read is not.
func NewerThanFilter(release string) bool {
	major, minor, ok := releaseNumbers(release)
	kmajor, kminor, _ := releaseNumbers(LastKnownRelease)
	return ok && (major > kmajor || major == kmajor && minor > kminor)
}

// releaseNumbers reads "MAJOR.MINOR" at the start of a release.
func releaseNumbers(release string) (major, minor int, ok bool) {
	n, err := fmt.Sscanf(release, "%d.%d", &major, &minor)
	return major, minor, err == nil && n == 2
}

// nrRange is the system-call numbers lo to hi, both included.
type nrRange struct{ lo, hi uint32 }

// abisFor lists the ABIs of GOARCH: on amd64 a process can also make i386 and x32
// system calls, on arm64 32-bit Arm (compat) ones; each must be covered or the
// filter is bypassed through them.
func abisFor(goarch string) ([]abi, error) {
	const x = x32SyscallBit
	switch goarch {
	case "amd64":
		return []abi{
			{arch: unix.AUDIT_ARCH_X86_64, known: []nrRange{{0, LastKnownNr}, {x, x | LastKnownNr}, {x | 512, x | x32LastOwn}},
				ioctl:   []uint32{16, x | 16, x | 514},
				deny:    []uint32{248, 249, 250, x | 248, x | 249, x | 250},
				prlimit: []uint32{302, x | 302}, fcntl: []uint32{72, x | 72}, clone3: []uint32{435, x | 435},
				aio:  []uint32{206, x | 206, x | 543},
				mmap: []uint32{9, x | 9}, memfd: []uint32{319, x | 319}, shmget: []uint32{29, x | 29},
				socket: []uint32{41, 53, x | 41, x | 53}, noSys: []uint32{425, x | 425}},
			{arch: unix.AUDIT_ARCH_I386, known: []nrRange{{0, LastKnownNr}}, ioctl: []uint32{54}, deny: []uint32{286, 287, 288}, prlimit: []uint32{340},
				fcntl: []uint32{55, 221}, clone3: []uint32{435}, aio: []uint32{245},
				mmap: []uint32{192}, memfd: []uint32{356}, shmget: []uint32{395}, ipc: []uint32{117}, oldMmap: []uint32{90},
				socket: []uint32{359, 360}, noSys: []uint32{102, 425}},
		}, nil
	case "arm64":
		return []abi{
			{arch: unix.AUDIT_ARCH_AARCH64, known: []nrRange{{0, LastKnownNr}}, ioctl: []uint32{29}, deny: []uint32{217, 218, 219}, prlimit: []uint32{261},
				fcntl: []uint32{25}, clone3: []uint32{435}, aio: []uint32{0},
				mmap: []uint32{222}, memfd: []uint32{279}, shmget: []uint32{194},
				socket: []uint32{198, 199}, noSys: []uint32{425}},
			// EABI only (arm64 runs no OABI binary), which has no socketcall, ipc or old mmap.
			{arch: unix.AUDIT_ARCH_ARM, known: []nrRange{{0, LastKnownNr}, {armPrivate, armLastPriv}}, ioctl: []uint32{54}, deny: []uint32{309, 310, 311}, prlimit: []uint32{369},
				fcntl: []uint32{55, 221}, clone3: []uint32{435}, aio: []uint32{243},
				mmap: []uint32{192}, memfd: []uint32{385}, shmget: []uint32{307},
				socket: []uint32{281, 288}, noSys: []uint32{425}},
		}, nil
	}
	return nil, fmt.Errorf("no seccomp filter for %s", goarch)
}

// Program returns the filter for this machine, serialised as an array of struct
// sock_filter (what bwrap reads from --add-seccomp-fd).
func Program(r Rules) ([]byte, error) {
	abis, err := abisFor(runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	prog, err := buildFilter(abis, r)
	if err != nil {
		return nil, err
	}
	return encodeFilter(prog), nil
}

// Install loads the filter into the calling thread; a process forked from that
// thread inherits it. no_new_privs (or CAP_SYS_ADMIN) must already be set.
func Install(r Rules) error {
	abis, err := abisFor(runtime.GOARCH)
	if err != nil {
		return err
	}
	prog, err := buildFilter(abis, r)
	if err != nil {
		return err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	_, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return fmt.Errorf("install seccomp filter: %w", errno)
	}
	return nil
}

// Labels of the shared tails every ABI's block jumps to.
const (
	lIoctl  = "ioctl"
	lPid1   = "pid1"
	lFcntl  = "fcntl"
	lFamily = "family"
	lMmap   = "mmap"
	lMemfd  = "memfd"
	lShmget = "shmget"
	lIpc    = "ipc"
	lEPERM  = "eperm"
	lENOSYS = "enosys"
	lENOMEM = "enomem"
	lAllow  = "allow"
)

// buildFilter lays the program out as: one block per ABI, then the shared tails.
//
//	block:   ld arch; jeq ABI ? next : next block; ld nr;
//	         (a number outside the ABI's known ranges) ? enosys : next;
//	         jeq ioctl_i ? ioctl : next …; jeq deny_j ? eperm : next …;
//	         jeq prlimit_l ? pid1 : next …; jeq fcntl_f ? fcntl : next …;
//	         jeq clone3_c ? enosys : next …; jeq io_setup_a ? enosys : next …;
//	         jeq mmap ? mmap : next …; jeq memfd ? memfd : next …; jeq shmget ? shmget : next …;
//	         jeq ipc ? ipc : next …; jeq oldMmap ? enosys : next …;
//	         (ConfineSockets) jeq socket_m ? family : next …; jeq noSys_n ? enosys : next …;
//	         ret ALLOW
//	unknown: ret ERRNO(ENOSYS) (a call of an ABI no block names)
//	ioctl:   ld args[1] low; jeq request_k ? eperm : next …;
//	         and ioctlRangeMask; jeq range_r ? eperm : next …; ret ALLOW
//	pid1:    ld args[0] low; jeq 0 ? allow : next; jeq 1 ? eperm : next;
//	         ld args[2] low; jeq 0 ? next : eperm; ld args[2] high; jeq 0 ? allow : eperm
//	fcntl:   ld args[1] low; jeq F_SETLEASE ? eperm : next; ret ALLOW
//	family:  ld args[0] low; jeq family_f ? allow : next …; ret ERRNO(EAFNOSUPPORT)
//	mmap:    ld args[3] low; and MAP_HUGETLB; jeq 0 ? allow : enomem
//	memfd:   ld args[1] low; and MFD_HUGETLB; jeq 0 ? allow : enosys
//	shmget:  ld args[2] low; and SHM_HUGETLB; jeq 0 ? allow : enomem
//	ipc:     ld args[0] low; and 0xFFFF; jeq SHMGET ? next : allow;
//	         ld args[3] low; and SHM_HUGETLB; jeq 0 ? allow : enomem
//	eperm:   ret ERRNO(EPERM)
//	enosys:  ret ERRNO(ENOSYS)
//	enomem:  ret ERRNO(ENOMEM)
//	allow:   ret ALLOW
func buildFilter(abis []abi, r Rules) ([]unix.SockFilter, error) {
	a := &assembler{labels: map[string]int{}}
	for i, x := range abis {
		next := fmt.Sprint("abi", i+1)
		a.ld(seccompArch)
		a.jeq(x.arch, "", next)
		a.ld(seccompNr)
		knownOnly(a, x.known, fmt.Sprint("known", i))
		a.jeqAll(x.ioctl, lIoctl)
		a.jeqAll(x.deny, lEPERM)
		a.jeqAll(x.prlimit, lPid1)
		a.jeqAll(x.fcntl, lFcntl)
		a.jeqAll(x.clone3, lENOSYS)
		a.jeqAll(x.aio, lENOSYS)
		a.jeqAll(x.mmap, lMmap)
		a.jeqAll(x.memfd, lMemfd)
		a.jeqAll(x.shmget, lShmget)
		a.jeqAll(x.ipc, lIpc)
		a.jeqAll(x.oldMmap, lENOSYS)
		if r.ConfineSockets {
			a.jeqAll(x.socket, lFamily)
			a.jeqAll(x.noSys, lENOSYS)
		}
		a.ret(unix.SECCOMP_RET_ALLOW)
		a.label(next)
	}
	a.ret(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS))

	a.label(lIoctl)
	a.ld(seccompArg1Low)
	a.jeqAll(deniedRequests, lEPERM)
	a.and(ioctlRangeMask)
	a.jeqAll(deniedRanges, lEPERM)
	a.ret(unix.SECCOMP_RET_ALLOW)

	a.label(lPid1)
	a.ld(seccompArg0Low)
	a.jeq(0, lAllow, "")
	a.jeq(1, lEPERM, "")
	a.ld(seccompArg2Low)
	a.jeq(0, "", lEPERM)
	a.ld(seccompArg2High)
	a.jeq(0, lAllow, lEPERM)

	a.label(lFcntl)
	a.ld(seccompArg1Low)
	a.jeq(unix.F_SETLEASE, lEPERM, "")
	a.ret(unix.SECCOMP_RET_ALLOW)

	a.label(lFamily)
	a.ld(seccompArg0Low)
	a.jeqAll(socketFamilies, lAllow)
	a.ret(unix.SECCOMP_RET_ERRNO | uint32(unix.EAFNOSUPPORT))

	hugePages(a)

	a.label(lEPERM)
	a.ret(unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM))
	a.label(lENOSYS)
	a.ret(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS))
	a.label(lENOMEM)
	a.ret(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOMEM))
	a.label(lAllow)
	a.ret(unix.SECCOMP_RET_ALLOW)
	return a.resolve()
}

// knownOnly sends a number outside every range of known to ENOSYS and falls
// through, at the label in, with the number still in the accumulator.
//
//	jge lo ? next : skip; jgt hi ? skip : in   (for each range; no jge when lo is 0)
//	ja enosys
func knownOnly(a *assembler, known []nrRange, in string) {
	for j, r := range known {
		skip := fmt.Sprint(in, ".", j)
		if r.lo > 0 {
			a.jump(unix.BPF_JGE, r.lo, "", skip)
		}
		a.jump(unix.BPF_JGT, r.hi, skip, in)
		a.label(skip)
	}
	a.jump(unix.BPF_JGE, 0, lENOSYS, lENOSYS)
	a.label(in)
}

// hugePages lays out the tails that refuse a mapping from the hugetlb pool: each
// tests its call's flag bit and allows the call without it.
func hugePages(a *assembler) {
	a.label(lMmap)
	a.ld(seccompArg3Low)
	a.and(unix.MAP_HUGETLB)
	a.jeq(0, lAllow, lENOMEM)

	a.label(lMemfd)
	a.ld(seccompArg1Low)
	a.and(unix.MFD_HUGETLB)
	a.jeq(0, lAllow, lENOSYS)

	a.label(lShmget)
	a.ld(seccompArg2Low)
	a.and(shmHugeTLB)
	a.jeq(0, lAllow, lENOMEM)

	a.label(lIpc)
	a.ld(seccompArg0Low)
	a.and(ipcCallMask)
	a.jeq(ipcShmget, "", lAllow)
	a.ld(seccompArg3Low)
	a.and(shmHugeTLB)
	a.jeq(0, lAllow, lENOMEM)
}

// assembler builds a classic BPF program whose jumps name labels; resolve turns
// them into the forward offsets (0–255 instructions) the kernel takes.
type assembler struct {
	prog   []unix.SockFilter
	labels map[string]int
	jumps  []jump
}

// jump is a conditional jump's targets, by label ("" is the next instruction).
type jump struct {
	at     int
	jt, jf string
}

func (a *assembler) label(name string) { a.labels[name] = len(a.prog) }

func (a *assembler) ld(off uint32) {
	a.prog = append(a.prog, unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: off})
}

func (a *assembler) and(k uint32) {
	a.prog = append(a.prog, unix.SockFilter{Code: unix.BPF_ALU | unix.BPF_AND | unix.BPF_K, K: k})
}

func (a *assembler) ret(k uint32) {
	a.prog = append(a.prog, unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: k})
}

func (a *assembler) jeq(k uint32, jt, jf string) { a.jump(unix.BPF_JEQ, k, jt, jf) }

// jump is a conditional jump of kind op (BPF_JEQ, BPF_JGT, BPF_JGE) against k.
func (a *assembler) jump(op uint16, k uint32, jt, jf string) {
	a.jumps = append(a.jumps, jump{at: len(a.prog), jt: jt, jf: jf})
	a.prog = append(a.prog, unix.SockFilter{Code: unix.BPF_JMP | op | unix.BPF_K, K: k})
}

// jeqAll jumps to target when the accumulator is any of ks, else falls through.
func (a *assembler) jeqAll(ks []uint32, target string) {
	for _, k := range ks {
		a.jeq(k, target, "")
	}
}

func (a *assembler) resolve() ([]unix.SockFilter, error) {
	off := func(at int, target string) (uint8, error) {
		if target == "" {
			return 0, nil
		}
		to, ok := a.labels[target]
		if !ok || to <= at || to-at-1 > 255 {
			return 0, fmt.Errorf("seccomp filter: jump from %d to %q (%d) out of reach", at, target, to)
		}
		return uint8(to - at - 1), nil
	}
	for _, j := range a.jumps {
		jt, err := off(j.at, j.jt)
		if err != nil {
			return nil, err
		}
		jf, err := off(j.at, j.jf)
		if err != nil {
			return nil, err
		}
		a.prog[j.at].Jt, a.prog[j.at].Jf = jt, jf
	}
	return a.prog, nil
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
