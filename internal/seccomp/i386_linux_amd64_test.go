package seccomp

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/abicall"
)

const i386HelperEnv = "AGENTBOX_SECCOMP_I386_HELPER"

// TestFilterI386Kernel makes the filtered calls through the i386 ABI (int $0x80 from
// this 64-bit process, as a 32-bit program's calls reach the kernel) under the
// loaded program: the keyring call, TIOCSTI, clone3, io_setup and a number past
// LastKnownNr must get the filter's answers, where without it the kernel answers
// otherwise (shown by the same calls before the filter). Where the kernel runs no
// i386 code the probe dies of SIGSEGV before the filter and the test says so: the
// kernel matrix's Debian kernels run it.
func TestFilterI386Kernel(t *testing.T) {
	if mode := os.Getenv(i386HelperEnv); mode != "" {
		i386Helper(mode == "filter")
		return
	}
	helper := func(mode string) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFilterI386Kernel$", "-test.count=1")
		cmd.Env = append(os.Environ(), i386HelperEnv+"="+mode)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := helper("probe")
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled() || strings.Contains(out, "SIGSEGV") {
		t.Skip("this kernel runs no i386 code (int $0x80 faults); the kernel matrix's cells do")
	}
	if err != nil {
		t.Fatalf("helper without the filter: %v\n%s", err, out)
	}
	before := out
	out, err = helper("filter")
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	for _, w := range []string{
		"getpid ok",
		"keyctl EPERM",
		"TIOCSTI EPERM",
		"clone3 ENOSYS",
		"io_setup ENOSYS",
		fmt.Sprintf("call %d ENOSYS", LastKnownNr+1),
	} {
		if !strings.Contains(out, w+"\n") {
			t.Errorf("i386 under the filter: no %q:\n%s", w, out)
		}
	}
	for _, w := range []string{"keyctl EPERM", "TIOCSTI EPERM", "clone3 ENOSYS", "io_setup ENOSYS"} {
		if strings.Contains(before, w+"\n") {
			t.Errorf("i386 without the filter already answers %q, the check proves nothing:\n%s", w, before)
		}
	}
	t.Logf("i386 without the filter:\n%sunder it:\n%s", before, out)
}

// i386Helper makes each call through int $0x80, with the filter installed when filter
// is set, and prints "NAME ANSWER" per call.
func i386Helper(filter bool) {
	show := func(name string, r int32) {
		if r < 0 && r > -4096 {
			fmt.Println(name, unix.ErrnoName(unix.Errno(-r)))
			return
		}
		fmt.Println(name, "ok")
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	show("getpid", abicall.Int80(20, 0, 0, 0)) // faults here where there is no i386 ABI
	if filter {
		loadFilter(Rules{})
	}
	// i386's numbers: keyctl 288 (KEYCTL_GET_KEYRING_ID of the session keyring),
	// ioctl 54, clone3 435 (no arguments: EINVAL unfiltered), io_setup 245 (no
	// context pointer: EFAULT unfiltered).
	show("keyctl", abicall.Int80(288, 0, 0xfffffffd, 0))
	show("TIOCSTI", abicall.Int80(54, null.Fd(), ioctlTIOCSTI, 0))
	show("clone3", abicall.Int80(435, 0, 0, 0))
	show("io_setup", abicall.Int80(245, 0, 0, 0))
	show(fmt.Sprint("call ", LastKnownNr+1), abicall.Int80(LastKnownNr+1, 0, 0, 0))
	os.Exit(0)
}
