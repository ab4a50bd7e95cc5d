package kmatrix

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// vmSpec is one qemu run.
type vmSpec struct {
	Kernel   string
	Initrd   string
	Cmdline  string
	MemoryMB int
	Timeout  time.Duration
	// Devices are qemu -device options added to the VM (a virtual GPU).
	Devices []string
	// Live, when set, receives the console as it comes, to follow a slow VM.
	Live io.Writer
}

// Accel returns the qemu accelerator: kvm when /dev/kvm opens and qemu really starts
// a vCPU with it, else tcg. The second check is needed: some nested hypervisors
// offer a /dev/kvm on which qemu aborts at once ("failed to set MSR 0x10a",
// kvm_buf_set_msrs assertion), so every cell would fail to boot.
func Accel() string {
	accelOnce.Do(func() {
		accel = "tcg"
		f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
		if err != nil {
			return
		}
		f.Close()
		if kvmStarts() {
			accel = "kvm"
		}
	})
	return accel
}

var (
	accelOnce sync.Once
	accel     string
)

// kvmStarts runs qemu with kvm, its vCPU created and reset but not started (-S): a
// broken KVM makes it abort within a second; a working one leaves it waiting, and
// it is killed after kvmProbeTime.
func kvmStarts() bool {
	ctx, cancel := context.WithTimeout(context.Background(), kvmProbeTime)
	defer cancel()
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", "-accel", "kvm", "-cpu", "host", "-m", "64", "-S",
		"-nodefaults", "-no-user-config", "-display", "none", "-monitor", "none", "-serial", "none")
	err := cmd.Run()
	return ctx.Err() != nil || err == nil
}

const kvmProbeTime = 2 * time.Second

// bootVM runs qemu until the guest powers off or the timeout passes, and returns
// the console output either way. timedOut says the VM was killed.
func bootVM(ctx context.Context, spec vmSpec) (console []byte, timedOut bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, spec.Timeout)
	defer cancel()
	args := []string{
		"-accel", Accel(),
		"-m", strconv.Itoa(spec.MemoryMB),
		"-smp", "1",
		// No default devices (VGA, NIC, floppy …): a faster boot, and nothing the
		// tests could depend on by accident.
		"-nodefaults", "-no-user-config", "-display", "none",
		"-serial", "stdio", "-monitor", "none",
		// A guest that reboots or panics ends qemu instead of booting again.
		"-no-reboot",
		"-kernel", spec.Kernel,
		"-initrd", spec.Initrd,
		"-append", spec.Cmdline,
	}
	if Accel() == "kvm" {
		args = append(args, "-cpu", "host")
	}
	for _, d := range spec.Devices {
		args = append(args, "-device", d)
	}
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", args...)
	var out lockedBuffer
	var w io.Writer = &out
	if spec.Live != nil {
		w = io.MultiWriter(&out, spec.Live)
	}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.Stdin = nil
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	runErr := cmd.Run()
	console = out.Bytes()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return console, true, fmt.Errorf("no power-off within %s", spec.Timeout)
	}
	if runErr != nil {
		return console, false, fmt.Errorf("qemu: %w", runErr)
	}
	return console, false, nil
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.b.Bytes())
}

// tail returns the last n lines of console output, without the serial line's
// carriage returns and the firmware's terminal escapes.
func tail(console []byte, n int) string {
	s := cleanConsole(console)
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func cleanConsole(b []byte) string {
	s := strings.ReplaceAll(string(b), "\r", "")
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b { // ESC [ ... final byte
			j := i + 1
			if j < len(s) && s[j] == '[' {
				j++
				for j < len(s) && (s[j] < 0x40 || s[j] > 0x7e) {
					j++
				}
			}
			i = j
			continue
		}
		out.WriteByte(s[i])
	}
	return out.String()
}
