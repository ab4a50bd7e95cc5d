package ttyfilter

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

const filterHelperEnv = "AGENTBOX_COMPAT_FILTER_HELPER"

// TestTTYFilter loads the serialised program, exactly as bwrap receives it, into a
// helper process and checks what the kernel answers: TIOCSTI and TIOCLINUX refused
// with EPERM (also with junk in the request's high bits), other ioctls and other
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
		"getpid ok",
		"prlimit64 1 operation not permitted",
		"prlimit64 1|junk<<32 operation not permitted",
		"prlimit64 0 ok",
		"prlimit64 self ok",
		"prlimit64 parent ok",
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
	prog, err := Program()
	if err != nil || len(prog)%sockFilterBytes != 0 {
		fmt.Println("filter:", err, len(prog))
		os.Exit(2)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Println("no_new_privs:", err)
		os.Exit(2)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog) / sockFilterBytes), Filter: (*unix.SockFilter)(unsafe.Pointer(&prog[0]))}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		fmt.Println("seccomp:", e)
		os.Exit(2)
	}
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
	} {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), p.req, uintptr(unsafe.Pointer(&c)))
		fmt.Println(p.name, e.Error())
	}
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
	os.Exit(0)
}

func TestBuildFilterLayout(t *testing.T) {
	for _, arch := range []string{"amd64", "arm64"} {
		abis, err := abisFor(arch)
		if err != nil {
			t.Fatal(err)
		}
		prog := buildFilter(abis)
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
