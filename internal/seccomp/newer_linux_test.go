package seccomp

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFilterRefusesUnknownNumbers evaluates the program for the numbers around each
// ABI's known ranges: the newest reviewed call (file_setattr) passes, every number
// past it fails with ENOSYS, on every ABI, as do the gaps between x32's ranges and
// past 32-bit Arm's private calls; x32's own calls and Arm's cacheflush pass.
func TestFilterRefusesUnknownNumbers(t *testing.T) {
	const x = x32SyscallBit
	enosys, allow := unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS), uint32(unix.SECCOMP_RET_ALLOW)
	rows := map[uint32][]struct {
		nr, want uint32
	}{
		unix.AUDIT_ARCH_X86_64: {
			{0, allow}, {LastKnownNr, allow}, {LastKnownNr + 1, enosys}, {470, enosys}, {511, enosys}, {512, enosys},
			{x - 1, enosys}, {x, allow}, {x | LastKnownNr, allow}, {x | (LastKnownNr + 1), enosys}, {x | 511, enosys},
			{x | 512, allow}, {x | x32LastOwn, allow}, {x | (x32LastOwn + 1), enosys}, {0xFFFFFFFF, enosys},
		},
		unix.AUDIT_ARCH_I386: {
			{0, allow}, {LastKnownNr, allow}, {LastKnownNr + 1, enosys}, {x | 1, enosys}, {0xFFFFFFFF, enosys},
		},
		unix.AUDIT_ARCH_AARCH64: {
			{1, allow}, {LastKnownNr, allow}, {LastKnownNr + 1, enosys}, {0xFFFFFFFF, enosys},
		},
		unix.AUDIT_ARCH_ARM: {
			{0, allow}, {LastKnownNr, allow}, {LastKnownNr + 1, enosys}, {armPrivate - 1, enosys},
			{armPrivate + 2, allow}, {armLastPriv, allow}, {armLastPriv + 1, enosys}, {0xFFFFFFFF, enosys},
		},
	}
	for _, arch := range []string{"amd64", "arm64"} {
		abis, err := abisFor(arch)
		if err != nil {
			t.Fatal(err)
		}
		for _, rules := range []Rules{{}, {ConfineSockets: true}} {
			prog, err := buildFilter(abis, rules)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range abis {
				for _, r := range rows[a.arch] {
					if got := run(t, prog, a.arch, r.nr, 1, 1, 1, 1); got != r.want {
						t.Errorf("%s %+v arch %#x call %#x: %#x, want %#x", arch, rules, a.arch, r.nr, got, r.want)
					}
				}
				// The named rules still answer inside the known range.
				if got := run(t, prog, a.arch, a.deny[0], 0); got != unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM) {
					t.Errorf("%s arch %#x keyring call %d: %#x, want EPERM", arch, a.arch, a.deny[0], got)
				}
			}
		}
	}
}

const newerHelperEnv = "AGENTBOX_SECCOMP_NEWER_HELPER"

// newerWindow is how far past LastKnownNr the kernel test looks for calls.
const newerWindow = 40

// TestFilterRefusesNewerCallsKernel loads the serialised program into a helper and
// makes every call numbered from LastKnownNr to LastKnownNr+newerWindow, with no
// arguments, before and after: those this kernel has (an answer other than ENOSYS
// before the filter) must fail with ENOSYS under it, LastKnownNr itself must get the
// kernel's own answer. On a kernel no newer than the filter every answer is ENOSYS
// both ways and the test checks only the passing call; the kernel matrix's newest
// cell has calls past it.
func TestFilterRefusesNewerCallsKernel(t *testing.T) {
	if os.Getenv(newerHelperEnv) == "1" {
		newerHelper()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFilterRefusesNewerCallsKernel$", "-test.count=1")
	cmd.Env = append(os.Environ(), newerHelperEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	var newer []string
	lines := 0
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			continue
		}
		lines++
		nr, _ := strconv.Atoi(f[0])
		before, after := f[1], f[2]
		switch {
		case nr == LastKnownNr && after != before:
			t.Errorf("call %d (the newest known) got %s under the filter, %s without", nr, after, before)
		case nr > LastKnownNr && after != "ENOSYS":
			t.Errorf("call %d, newer than the filter: %s under it (%s without), want ENOSYS", nr, after, before)
		case nr > LastKnownNr && before != "ENOSYS":
			newer = append(newer, f[0])
		}
	}
	if lines != newerWindow+1 {
		t.Fatalf("helper reported %d calls, want %d:\n%s", lines, newerWindow+1, out)
	}
	t.Logf("calls of this kernel newer than the filter (%d), refused with ENOSYS: %v", LastKnownNr, newer)
}

// newerHelper makes each call without the filter, installs it, makes each again, and
// prints "NR BEFORE AFTER" per call.
func newerHelper() {
	errName := func(e unix.Errno) string {
		if e == 0 {
			return "ok"
		}
		if n := unix.ErrnoName(e); n != "" {
			return n
		}
		return fmt.Sprint("errno", int(e))
	}
	call := func(nr uintptr) string {
		_, _, e := unix.RawSyscall6(nr, 0, 0, 0, 0, 0, 0)
		return errName(e)
	}
	before := map[uintptr]string{}
	for nr := uintptr(LastKnownNr); nr <= LastKnownNr+newerWindow; nr++ {
		before[nr] = call(nr)
	}
	loadFilter(Rules{})
	for nr := uintptr(LastKnownNr); nr <= LastKnownNr+newerWindow; nr++ {
		fmt.Println(nr, before[nr], call(nr))
	}
	os.Exit(0)
}

// TestNewerThanFilter: doctor's note is given for a kernel release past
// LastKnownRelease only.
func TestNewerThanFilter(t *testing.T) {
	for release, want := range map[string]bool{
		"7.2.13+deb14-amd64": true,
		"6.18.44-fc-v1272":   true,
		"6.17.0":             false,
		"6.12.117+deb13":     false,
		"6.1.0-50-amd64":     false,
		"5.10.0-32-amd64":    false,
		"6.170.1":            true, // a number, not a string: 170 > 17
		"":                   false,
		"linux":              false,
	} {
		if got := NewerThanFilter(release); got != want {
			t.Errorf("NewerThanFilter(%q) = %v, want %v", release, got, want)
		}
	}
}
