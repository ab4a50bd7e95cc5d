package seccomp

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

const filterHelperEnv = "AGENTBOX_COMPAT_FILTER_HELPER"

// TestTTYFilter loads the serialised program, exactly as bwrap receives it, into a
// helper process and checks what the kernel answers: TIOCSTI, TIOCLINUX, TIOCSETD and
// the virtual console's requests refused with EPERM (also with junk in the request's
// high bits), other ioctls (TIOCEXCL, which the launcher undoes instead) and other
// system calls untouched. On /dev/null an unfiltered tty ioctl fails with ENOTTY, so
// EPERM can only come from the filter.
func TestTTYFilter(t *testing.T) {
	if os.Getenv(filterHelperEnv) == "1" {
		filterHelper()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestTTYFilter$", "-test.count=1")
	cmd.Env = append(os.Environ(), filterHelperEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	want := []string{
		"TIOCSTI operation not permitted",
		"TIOCSTI|junk<<32 operation not permitted",
		"TIOCLINUX operation not permitted",
		"TCGETS inappropriate ioctl for device",
		"TIOCSTI+1 inappropriate ioctl for device",
		"FS_IOC_ADD_ENCRYPTION_KEY operation not permitted",
		"FS_IOC_REMOVE_ENCRYPTION_KEY operation not permitted",
		"FS_IOC_REMOVE_ENCRYPTION_KEY_ALL_USERS operation not permitted",
		"FS_IOC_GET_ENCRYPTION_KEY_STATUS inappropriate ioctl for device",
		"TIOCSETD operation not permitted",
		"TIOCGETD inappropriate ioctl for device",
		"KDSKBMODE operation not permitted",
		"KDSETMODE operation not permitted",
		"VT_ACTIVATE operation not permitted",
		"TIOCEXCL inappropriate ioctl for device",
		"add_key operation not permitted",
		"request_key operation not permitted",
		"keyctl operation not permitted",
		"getpid ok",
		"prlimit64 1 operation not permitted",
		"prlimit64 1|junk<<32 operation not permitted",
		"prlimit64 0 ok",
		"prlimit64 self ok",
		"prlimit64 parent ok",
		"prlimit64 set 0 ok",
		"prlimit64 set self operation not permitted",
		"prlimit64 set parent operation not permitted",
		"clone3 function not implemented",
		"io_setup function not implemented",
		"F_SETLEASE operation not permitted",
		"F_GETLEASE ok",
		"mmap MAP_HUGETLB cannot allocate memory",
		"mmap invalid argument",
		"memfd_create MFD_HUGETLB function not implemented",
		"memfd_create ok",
		"shmget SHM_HUGETLB cannot allocate memory",
		"shmget invalid argument",
	}
	for _, w := range want {
		if !strings.Contains(string(out), w+"\n") {
			t.Errorf("helper output lacks %q:\n%s", w, out)
		}
	}
}

// filterHelper installs the filter on every thread of this process and reports each
// probe's result on stdout, one line each.
func filterHelper() {
	loadFilter(Rules{})
	f, err := os.Open(os.DevNull)
	if err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	var c byte = 'x'
	for _, p := range []struct {
		name string
		req  uintptr
	}{
		{"TIOCSTI", unix.TIOCSTI},
		{"TIOCSTI|junk<<32", unix.TIOCSTI | 0xdead<<32},
		{"TIOCLINUX", unix.TIOCLINUX},
		{"TCGETS", unix.TCGETS},
		{"TIOCSTI+1", unix.TIOCSTI + 1},
		{"FS_IOC_ADD_ENCRYPTION_KEY", unix.FS_IOC_ADD_ENCRYPTION_KEY},
		{"FS_IOC_REMOVE_ENCRYPTION_KEY", unix.FS_IOC_REMOVE_ENCRYPTION_KEY},
		{"FS_IOC_REMOVE_ENCRYPTION_KEY_ALL_USERS", unix.FS_IOC_REMOVE_ENCRYPTION_KEY_ALL_USERS},
		{"FS_IOC_GET_ENCRYPTION_KEY_STATUS", unix.FS_IOC_GET_ENCRYPTION_KEY_STATUS},
		{"TIOCSETD", unix.TIOCSETD},
		{"TIOCGETD", unix.TIOCGETD},
		{"KDSKBMODE", 0x4B45},
		{"KDSETMODE", 0x4B3A},
		{"VT_ACTIVATE", 0x5606},
		{"TIOCEXCL", unix.TIOCEXCL},
	} {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), p.req, uintptr(unsafe.Pointer(&c)))
		fmt.Println(p.name, e.Error())
	}
	// Unfiltered, each of these would succeed or fail with ENOKEY: a key in the
	// helper's own process keyring, a search for a key nobody has, the id of the
	// session keyring.
	user, desc, payload := []byte("user\x00"), []byte("agentbox-filter-test\x00"), []byte("x")
	_, _, e := unix.Syscall6(unix.SYS_ADD_KEY, uintptr(unsafe.Pointer(&user[0])), uintptr(unsafe.Pointer(&desc[0])),
		uintptr(unsafe.Pointer(&payload[0])), 1, uintptr(0xfffffffe), 0) // KEY_SPEC_PROCESS_KEYRING
	fmt.Println("add_key", errText(e))
	_, _, e = unix.Syscall6(unix.SYS_REQUEST_KEY, uintptr(unsafe.Pointer(&user[0])), uintptr(unsafe.Pointer(&desc[0])), 0, 0, 0, 0)
	fmt.Println("request_key", errText(e))
	_, _, e = unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(0xfffffffd), 0) // KEY_SPEC_SESSION_KEYRING
	fmt.Println("keyctl", errText(e))
	if unix.Getpid() > 0 {
		fmt.Println("getpid ok")
	}
	// PID 1 here is the host's init; run as root (as the suite is), only the filter
	// refuses to read its limits. Other processes, the caller's parent (the test, same
	// credentials) included, are untouched.
	for _, p := range []struct {
		name string
		pid  uintptr
	}{{"1", 1}, {"1|junk<<32", 1 | 0xdead<<32}, {"0", 0}, {"self", uintptr(os.Getpid())}, {"parent", uintptr(os.Getppid())}} {
		var lim unix.Rlimit
		_, _, e := unix.RawSyscall6(unix.SYS_PRLIMIT64, p.pid, unix.RLIMIT_NOFILE, 0, uintptr(unsafe.Pointer(&lim)), 0, 0)
		if e == 0 {
			fmt.Println("prlimit64", p.name, "ok")
		} else {
			fmt.Println("prlimit64", p.name, e.Error())
		}
	}
	// Setting a limit: only the caller's own, by pid 0 (a thread of PID 1 is another
	// handle on PID 1's limits). The limit set is the one there already.
	for _, p := range []struct {
		name string
		pid  uintptr
	}{{"0", 0}, {"self", uintptr(os.Getpid())}, {"parent", uintptr(os.Getppid())}} {
		var lim unix.Rlimit
		_, _, e := unix.RawSyscall6(unix.SYS_PRLIMIT64, p.pid, unix.RLIMIT_NOFILE, 0, uintptr(unsafe.Pointer(&lim)), 0, 0)
		if e == 0 {
			_, _, e = unix.RawSyscall6(unix.SYS_PRLIMIT64, p.pid, unix.RLIMIT_NOFILE, uintptr(unsafe.Pointer(&lim)), 0, 0, 0)
		}
		fmt.Println("prlimit64 set", p.name, errText(e))
	}
	// Unfiltered, clone3 with no arguments fails with EINVAL: it never clones.
	_, _, e = unix.RawSyscall(unix.SYS_CLONE3, 0, 0, 0)
	fmt.Println("clone3", errText(e))
	// Unfiltered, io_setup of no events fails with EINVAL: it reserves nothing.
	_, _, e = unix.RawSyscall(unix.SYS_IO_SETUP, 0, 0, 0)
	fmt.Println("io_setup", errText(e))
	// Unfiltered, a lease on /dev/null fails with EINVAL (not a regular file); the
	// lease's kind is read from it (F_UNLCK).
	_, _, e = unix.Syscall(unix.SYS_FCNTL, f.Fd(), unix.F_SETLEASE, unix.F_RDLCK)
	fmt.Println("F_SETLEASE", errText(e))
	_, _, e = unix.Syscall(unix.SYS_FCNTL, f.Fd(), unix.F_GETLEASE, 0)
	fmt.Println("F_GETLEASE", errText(e))
	hugePageProbes()
	os.Exit(0)
}

// hugePageProbes asks for huge pages each way with arguments the kernel itself
// refuses with EINVAL (no length, no size), or, for memfd_create, allows: only
// the filter answers ENOMEM or ENOSYS. Without the flag, the kernel's answer.
func hugePageProbes() {
	const private, anonymous = 0x2, 0x20
	_, _, e := unix.Syscall6(unix.SYS_MMAP, 0, 0, unix.PROT_READ, private|anonymous|unix.MAP_HUGETLB, ^uintptr(0), 0)
	fmt.Println("mmap MAP_HUGETLB", errText(e))
	_, _, e = unix.Syscall6(unix.SYS_MMAP, 0, 0, unix.PROT_READ, private|anonymous, ^uintptr(0), 0)
	fmt.Println("mmap", errText(e))
	name := []byte("agentbox-filter-test\x00")
	fd, _, e := unix.Syscall(unix.SYS_MEMFD_CREATE, uintptr(unsafe.Pointer(&name[0])), unix.MFD_HUGETLB|unix.MFD_CLOEXEC, 0)
	fmt.Println("memfd_create MFD_HUGETLB", errText(e))
	if e == 0 {
		unix.Close(int(fd))
	}
	fd, _, e = unix.Syscall(unix.SYS_MEMFD_CREATE, uintptr(unsafe.Pointer(&name[0])), unix.MFD_CLOEXEC, 0)
	fmt.Println("memfd_create", errText(e))
	if e == 0 {
		unix.Close(int(fd))
	}
	_, _, e = unix.Syscall(unix.SYS_SHMGET, 0, 0, 0o1000|0o600|shmHugeTLB) // IPC_PRIVATE, IPC_CREAT
	fmt.Println("shmget SHM_HUGETLB", errText(e))
	_, _, e = unix.Syscall(unix.SYS_SHMGET, 0, 0, 0o1000|0o600)
	fmt.Println("shmget", errText(e))
}

// loadFilter installs the serialised program, exactly as bwrap receives it, on every
// thread of this helper process, or ends it with status 2 saying why.
func loadFilter(r Rules) {
	prog, err := Program(r)
	if err != nil || len(prog)%sockFilterBytes != 0 {
		fmt.Println("filter:", err, len(prog))
		os.Exit(2)
	}
	// no_new_privs is a thread's: the seccomp call must run on the thread that set
	// it, or an unprivileged caller gets EACCES (seen in a kernel-matrix VM, where
	// the goroutine moved between the two calls).
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Println("no_new_privs:", err)
		os.Exit(2)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog) / sockFilterBytes), Filter: (*unix.SockFilter)(unsafe.Pointer(&prog[0]))}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		fmt.Println("seccomp:", e)
		os.Exit(2)
	}
}

func errText(e unix.Errno) string {
	if e == 0 {
		return "ok"
	}
	return e.Error()
}

// run evaluates prog, the way the kernel does, for one call with the low words of
// its first arguments.
func run(t *testing.T, prog []unix.SockFilter, arch, nr uint32, args ...uint32) uint32 {
	t.Helper()
	data := map[uint32]uint32{seccompNr: nr, seccompArch: arch}
	for i, a := range args {
		data[seccompArg0Low+8*uint32(i)] = a
	}
	var acc uint32
	for pc := 0; pc < len(prog); pc++ {
		f := prog[pc]
		switch f.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			acc = data[f.K]
		case unix.BPF_ALU | unix.BPF_AND | unix.BPF_K:
			acc &= f.K
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K, unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K:
			taken := acc == f.K
			switch f.Code &^ (unix.BPF_JMP | unix.BPF_K) {
			case unix.BPF_JGT:
				taken = acc > f.K
			case unix.BPF_JGE:
				taken = acc >= f.K
			}
			if taken {
				pc += int(f.Jt)
			} else {
				pc += int(f.Jf)
			}
		case unix.BPF_RET | unix.BPF_K:
			return f.K
		default:
			t.Fatalf("instruction %d: unknown code %#x", pc, f.Code)
		}
	}
	t.Fatal("program ran off its end")
	return 0
}

// TestFilterABIs evaluates the program for every ABI of each architecture: the
// keyring calls by their number in each ABI (x32's with its bit, i386's own numbers),
// the refused ioctl requests through each ABI's ioctl, and a neighbour of each that
// must pass.
func TestFilterABIs(t *testing.T) {
	const deny, allow = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM), unix.SECCOMP_RET_ALLOW
	keyrings := map[uint32][]uint32{ // add_key, request_key, keyctl
		unix.AUDIT_ARCH_X86_64:  {248, 249, 250, x32SyscallBit | 248, x32SyscallBit | 249, x32SyscallBit | 250},
		unix.AUDIT_ARCH_I386:    {286, 287, 288},
		unix.AUDIT_ARCH_AARCH64: {217, 218, 219},
		unix.AUDIT_ARCH_ARM:     {309, 310, 311},
	}
	clone3s := map[uint32][]uint32{
		unix.AUDIT_ARCH_X86_64:  {435, x32SyscallBit | 435},
		unix.AUDIT_ARCH_I386:    {435},
		unix.AUDIT_ARCH_AARCH64: {435},
		unix.AUDIT_ARCH_ARM:     {435},
	}
	aios := map[uint32][]uint32{ // io_setup (x32's own, and the 64-bit one called with the x32 bit)
		unix.AUDIT_ARCH_X86_64:  {206, x32SyscallBit | 206, x32SyscallBit | 543},
		unix.AUDIT_ARCH_I386:    {245},
		unix.AUDIT_ARCH_AARCH64: {0},
		unix.AUDIT_ARCH_ARM:     {243},
	}
	fcntls := map[uint32][]uint32{ // fcntl, and fcntl64 where there is one
		unix.AUDIT_ARCH_X86_64:  {72, x32SyscallBit | 72},
		unix.AUDIT_ARCH_I386:    {55, 221},
		unix.AUDIT_ARCH_AARCH64: {25},
		unix.AUDIT_ARCH_ARM:     {55, 221},
	}
	hugeCalls := map[uint32][][2]uint32{ // call, the argument holding its huge page flag
		unix.AUDIT_ARCH_X86_64:  {{9, 3}, {x32SyscallBit | 9, 3}, {319, 1}, {x32SyscallBit | 319, 1}, {29, 2}, {x32SyscallBit | 29, 2}},
		unix.AUDIT_ARCH_I386:    {{192, 3}, {356, 1}, {395, 2}},
		unix.AUDIT_ARCH_AARCH64: {{222, 3}, {279, 1}, {194, 2}},
		unix.AUDIT_ARCH_ARM:     {{192, 3}, {385, 1}, {307, 2}},
	}
	ioctls := map[uint32][]uint32{
		unix.AUDIT_ARCH_X86_64:  {16, x32SyscallBit | 16, x32SyscallBit | 514},
		unix.AUDIT_ARCH_I386:    {54},
		unix.AUDIT_ARCH_AARCH64: {29},
		unix.AUDIT_ARCH_ARM:     {54},
	}
	for _, arch := range []string{"amd64", "arm64"} {
		abis, err := abisFor(arch)
		if err != nil {
			t.Fatal(err)
		}
		prog, err := buildFilter(abis, Rules{})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range abis {
			for _, nr := range keyrings[a.arch] {
				if got := run(t, prog, a.arch, nr, 0); got != deny {
					t.Errorf("%s arch %#x call %d: %#x, want EPERM", arch, a.arch, nr, got)
				}
				if got := run(t, prog, a.arch, nr+3, 0); got != allow {
					t.Errorf("%s arch %#x call %d: %#x, want allowed", arch, a.arch, nr+3, got)
				}
			}
			for _, nr := range ioctls[a.arch] {
				for _, req := range deniedRequests {
					if got := run(t, prog, a.arch, nr, 0, req); got != deny {
						t.Errorf("%s arch %#x ioctl %d request %#x: %#x, want EPERM", arch, a.arch, nr, req, got)
					}
					if got := run(t, prog, a.arch, nr, 0, req+1); got != allow && !slices.Contains(deniedRequests, req+1) {
						t.Errorf("%s arch %#x ioctl %d request %#x: %#x, want allowed", arch, a.arch, nr, req+1, got)
					}
				}
				for _, r := range deniedRanges {
					for _, req := range []uint32{r, r | 0x3A, r | 0xFF} {
						if got := run(t, prog, a.arch, nr, 0, req); got != deny {
							t.Errorf("%s arch %#x ioctl %d request %#x: %#x, want EPERM", arch, a.arch, nr, req, got)
						}
					}
					// The neighbours, and a new-style request of the same type byte.
					for _, req := range []uint32{r - 1, r + 0x100, 0x80040000 | r} {
						if got := run(t, prog, a.arch, nr, 0, req); got != allow {
							t.Errorf("%s arch %#x ioctl %d request %#x: %#x, want allowed", arch, a.arch, nr, req, got)
						}
					}
				}
			}
		}
		for _, a := range abis {
			for _, nr := range fcntls[a.arch] {
				if got := run(t, prog, a.arch, nr, 0, unix.F_SETLEASE); got != deny {
					t.Errorf("%s arch %#x fcntl %d F_SETLEASE: %#x, want EPERM", arch, a.arch, nr, got)
				}
				for _, cmd := range []uint32{unix.F_GETLEASE, unix.F_SETFL, unix.F_SETLK} {
					if got := run(t, prog, a.arch, nr, 0, cmd); got != allow {
						t.Errorf("%s arch %#x fcntl %d command %d: %#x, want allowed", arch, a.arch, nr, cmd, got)
					}
				}
			}
			for _, nr := range clone3s[a.arch] {
				if got := run(t, prog, a.arch, nr, 0); got != unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS) {
					t.Errorf("%s arch %#x clone3 %d: %#x, want ENOSYS", arch, a.arch, nr, got)
				}
			}
			for _, nr := range aios[a.arch] {
				if got := run(t, prog, a.arch, nr, 0); got != unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS) {
					t.Errorf("%s arch %#x io_setup %d: %#x, want ENOSYS", arch, a.arch, nr, got)
				}
			}
			for _, c := range hugeCalls[a.arch] {
				checkHugeCall(t, prog, arch, a.arch, c[0], int(c[1]))
			}
		}
		checkIPC(t, prog, arch)
		if got := run(t, prog, 0x1234, 250, 0); got != unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS) {
			t.Errorf("%s unknown arch: %#x, want ENOSYS", arch, got)
		}
	}
}

// checkHugeCall: call nr of arch refuses its huge page flag (in argument arg, with
// other flags beside it: ENOMEM, or ENOSYS for memfd_create's) and allows the call
// without it.
func checkHugeCall(t *testing.T, prog []unix.SockFilter, goarch string, arch, nr uint32, arg int) {
	t.Helper()
	flag, want := uint32(unix.MAP_HUGETLB|0x22), uint32(unix.ENOMEM)
	switch arg {
	case 1:
		flag, want = unix.MFD_HUGETLB|unix.MFD_CLOEXEC, uint32(unix.ENOSYS)
	case 2:
		flag = shmHugeTLB | 0o1600
	}
	args := make([]uint32, arg+1)
	args[arg] = flag
	if got := run(t, prog, arch, nr, args...); got != unix.SECCOMP_RET_ERRNO|want {
		t.Errorf("%s arch %#x call %d with flags %#x: %#x, want errno %d", goarch, arch, nr, flag, got, want)
	}
	args[arg] = flag &^ (unix.MAP_HUGETLB | unix.MFD_HUGETLB | shmHugeTLB)
	if got := run(t, prog, arch, nr, args...); got != unix.SECCOMP_RET_ALLOW {
		t.Errorf("%s arch %#x call %d with flags %#x: %#x, want allowed", goarch, arch, nr, args[arg], got)
	}
}

// checkIPC: i386's ipc(SHMGET) is refused with SHM_HUGETLB (also with a version in
// the call's high half), other calls of ipc pass, and i386's old mmap, whose flags
// lie behind a pointer, is refused whole.
func checkIPC(t *testing.T, prog []unix.SockFilter, goarch string) {
	t.Helper()
	if goarch != "amd64" {
		return
	}
	const i386, ipc = unix.AUDIT_ARCH_I386, 117
	enomem := unix.SECCOMP_RET_ERRNO | uint32(unix.ENOMEM)
	for _, c := range []struct {
		call, flags, want uint32
	}{
		{ipcShmget, shmHugeTLB | 0o1600, enomem},
		{1<<16 | ipcShmget, shmHugeTLB, enomem},
		{ipcShmget, 0o1600, unix.SECCOMP_RET_ALLOW},
		{21, shmHugeTLB, unix.SECCOMP_RET_ALLOW}, // SHMAT: its fourth argument is no flag
	} {
		if got := run(t, prog, i386, ipc, c.call, 0, 0, c.flags); got != c.want {
			t.Errorf("i386 ipc call %#x flags %#o: %#x, want %#x", c.call, c.flags, got, c.want)
		}
	}
	if got := run(t, prog, i386, 90, 0); got != unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS) {
		t.Errorf("i386 old mmap: %#x, want ENOSYS", got)
	}
}

func TestBuildFilterLayout(t *testing.T) {
	for _, c := range []struct {
		arch  string
		rules Rules
	}{{"amd64", Rules{}}, {"amd64", Rules{ConfineSockets: true}}, {"arm64", Rules{}}, {"arm64", Rules{ConfineSockets: true}}} {
		arch := c.arch
		abis, err := abisFor(arch)
		if err != nil {
			t.Fatal(err)
		}
		prog, err := buildFilter(abis, c.rules)
		if err != nil {
			t.Fatal(err)
		}
		last := len(prog) - 1
		for i, f := range prog {
			if f.Code&0x07 == unix.BPF_JMP && (i+1+int(f.Jt) > last || i+1+int(f.Jf) > last) {
				t.Errorf("%s: instruction %d jumps past the end", arch, i)
			}
		}
		if prog[last].Code != unix.BPF_RET|unix.BPF_K || prog[last].K != unix.SECCOMP_RET_ALLOW {
			t.Errorf("%s: program does not end in ret ALLOW", arch)
		}
	}
	if _, err := abisFor("mips"); err == nil {
		t.Error("abisFor(mips) gave a filter; want an error rather than no protection")
	}
}
