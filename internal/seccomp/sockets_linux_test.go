package seccomp

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestConfineSocketsABIs evaluates the program with and without ConfineSockets for
// every ABI of each architecture: socket and socketpair by their numbers in each ABI
// (x32's with its bit, i386's, compat Arm's) succeed only for the allowed families,
// socketcall and io_uring_setup fail with ENOSYS; without the rule all of them pass.
func TestConfineSocketsABIs(t *testing.T) {
	const allow = unix.SECCOMP_RET_ALLOW
	const eafnosupport, enosys = unix.SECCOMP_RET_ERRNO | uint32(unix.EAFNOSUPPORT), unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	const x = x32SyscallBit
	sockets := map[uint32][]uint32{ // socket, socketpair
		unix.AUDIT_ARCH_X86_64:  {41, 53, x | 41, x | 53},
		unix.AUDIT_ARCH_I386:    {359, 360},
		unix.AUDIT_ARCH_AARCH64: {198, 199},
		unix.AUDIT_ARCH_ARM:     {281, 288},
	}
	noSys := map[uint32][]uint32{ // socketcall, io_uring_setup
		unix.AUDIT_ARCH_X86_64:  {425, x | 425},
		unix.AUDIT_ARCH_I386:    {102, 425},
		unix.AUDIT_ARCH_AARCH64: {425},
		unix.AUDIT_ARCH_ARM:     {425},
	}
	allowed := []uint32{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK, unix.AF_PACKET}
	refused := []uint32{unix.AF_UNSPEC, unix.AF_VSOCK, unix.AF_ALG, unix.AF_BLUETOOTH, unix.AF_KEY, unix.AF_XDP,
		unix.AF_TIPC, unix.AF_QIPCRTR, unix.AF_CAN, unix.AF_RDS, unix.AF_MAX, 0xffffffff}
	for _, arch := range []string{"amd64", "arm64"} {
		abis, err := abisFor(arch)
		if err != nil {
			t.Fatal(err)
		}
		confined, err := buildFilter(abis, Rules{ConfineSockets: true})
		if err != nil {
			t.Fatal(err)
		}
		open, err := buildFilter(abis, Rules{})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range abis {
			if len(sockets[a.arch]) == 0 {
				t.Errorf("%s arch %#x: no socket numbers to test", arch, a.arch)
			}
			for _, nr := range sockets[a.arch] {
				for _, f := range allowed {
					if got := run(t, confined, a.arch, nr, f, unix.SOCK_STREAM); got != allow {
						t.Errorf("%s arch %#x call %d family %d: %#x, want allowed", arch, a.arch, nr, f, got)
					}
				}
				for _, f := range refused {
					if got := run(t, confined, a.arch, nr, f, unix.SOCK_STREAM); got != eafnosupport {
						t.Errorf("%s arch %#x call %d family %d: %#x, want EAFNOSUPPORT", arch, a.arch, nr, f, got)
					}
					if got := run(t, open, a.arch, nr, f, unix.SOCK_STREAM); got != allow {
						t.Errorf("%s arch %#x call %d family %d unconfined: %#x, want allowed", arch, a.arch, nr, f, got)
					}
				}
			}
			for _, nr := range noSys[a.arch] {
				if got := run(t, confined, a.arch, nr, 1, 0); got != enosys {
					t.Errorf("%s arch %#x call %d: %#x, want ENOSYS", arch, a.arch, nr, got)
				}
				if got := run(t, open, a.arch, nr, 1, 0); got != allow {
					t.Errorf("%s arch %#x call %d unconfined: %#x, want allowed", arch, a.arch, nr, got)
				}
			}
		}
	}
}

const socketHelperEnv = "AGENTBOX_SECCOMP_SOCKET_HELPER"

// TestConfineSocketsKernel loads the serialised program, as bwrap receives it, into
// helper processes, one with ConfineSockets and one without, and compares what the
// kernel answers: the allowed families as without the rule, the others
// EAFNOSUPPORT (also with junk in the family's high bits, and through x32's
// numbers), io_uring_setup ENOSYS. At least one refused family must be creatable
// without the rule, or nothing here could tell the rule from the kernel.
func TestConfineSocketsKernel(t *testing.T) {
	if mode := os.Getenv(socketHelperEnv); mode != "" {
		socketHelper(mode == "confined")
		return
	}
	probe := func(mode string) map[string]string {
		cmd := exec.Command(os.Args[0], "-test.run=^TestConfineSocketsKernel$", "-test.count=1")
		cmd.Env = append(os.Environ(), socketHelperEnv+"="+mode)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s helper: %v\n%s", mode, err, out)
		}
		res := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if name, r, ok := strings.Cut(line, ": "); ok {
				res[name] = r
			}
		}
		return res
	}
	open, confined := probe("open"), probe("confined")
	eaf := unix.EAFNOSUPPORT.Error()
	distinguished := false
	for _, p := range socketProbes() {
		got, was := confined[p.name], open[p.name]
		switch {
		case got == "":
			t.Errorf("%s: no answer from the confined helper", p.name)
		case p.allowed && got != was:
			t.Errorf("%s: %s under the rule, %s without; want the same", p.name, got, was)
		case !p.allowed && got != eaf:
			t.Errorf("%s: %s under the rule, want %s", p.name, got, eaf)
		case !p.allowed && was == "ok":
			distinguished = true
		}
	}
	if got := confined["io_uring_setup"]; got != unix.ENOSYS.Error() {
		t.Errorf("io_uring_setup under the rule: %s, want %s", got, unix.ENOSYS.Error())
	}
	if !distinguished {
		testenv.SkipKernel(t, "AF_VSOCK", "this kernel creates none of the refused families without the filter (%v), so the rule cannot be told from the kernel", open)
	}
}

type socketProbe struct {
	name    string
	nr      uintptr
	family  uintptr
	typ     uintptr
	proto   uintptr
	allowed bool
}

func socketProbes() []socketProbe {
	const junk = 0xdead << 32
	ps := []socketProbe{
		{"socket unix", unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM, 0, true},
		{"socket inet", unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_DGRAM, 0, true},
		{"socket inet|junk<<32", unix.SYS_SOCKET, unix.AF_INET | junk, unix.SOCK_DGRAM, 0, true},
		{"socket inet6", unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_DGRAM, 0, true},
		{"socket netlink", unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE, true},
		{"socket packet", unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_DGRAM, 0, true},
		{"socketpair unix", unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_STREAM, 0, true},
		{"socket vsock", unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM, 0, false},
		{"socket vsock|junk<<32", unix.SYS_SOCKET, unix.AF_VSOCK | junk, unix.SOCK_STREAM, 0, false},
		{"socketpair vsock", unix.SYS_SOCKETPAIR, unix.AF_VSOCK, unix.SOCK_STREAM, 0, false},
		{"socket alg", unix.SYS_SOCKET, unix.AF_ALG, unix.SOCK_SEQPACKET, 0, false},
	}
	if runtime.GOARCH == "amd64" {
		// Without the filter the kernel answers ENOSYS unless it runs x32 programs.
		ps = append(ps, socketProbe{"x32 socket vsock", x32SyscallBit | unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM, 0, false})
	}
	return ps
}

// socketHelper installs the filter (with ConfineSockets when confined) on every
// thread of this process and prints each probe's result, one line each.
func socketHelper(confined bool) {
	loadFilter(Rules{ConfineSockets: confined})
	for _, p := range socketProbes() {
		var pair [2]int32
		fd, _, e := unix.RawSyscall6(p.nr, p.family, p.typ, p.proto, uintptr(unsafe.Pointer(&pair)), 0, 0)
		fmt.Printf("%s: %s\n", p.name, errText(e))
		if e == 0 && p.nr != unix.SYS_SOCKETPAIR {
			unix.Close(int(fd))
		}
	}
	var params [120]byte // struct io_uring_params
	fd, _, e := unix.RawSyscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params)), 0)
	fmt.Printf("io_uring_setup: %s\n", errText(e))
	if e == 0 {
		unix.Close(int(fd))
	}
	os.Exit(0)
}
