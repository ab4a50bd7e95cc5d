package policy

import (
	"fmt"
	"github.com/agentbox/agentbox/internal/bytesize"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// Limits bound what the session's processes together may use (--memory, --pids,
// --cpus), enforced in a cgroup of the session's own (internal/leafcg). Zero in a
// field: no limit of that kind. The launch is refused where the host cannot
// enforce one that is set: never a silently unlimited session.
type Limits struct {
	// Memory is memory.max in bytes; the session gets no swap (memory.swap.max 0).
	Memory int64
	// Pids is pids.max: tasks (processes and threads), agentbox's init included.
	Pids int64
	// MilliCPUs is cpu.max in thousandths of a CPU (500: half a CPU's time).
	MilliCPUs int64
}

// Set says whether any limit is set.
func (l Limits) Set() bool { return l.Memory > 0 || l.Pids > 0 || l.MilliCPUs > 0 }

// The smallest limits accepted: below them the sandbox's own setup fails before the
// command starts, and a value meant with a unit and given without one is caught.
const (
	MinMemory = 16 << 20
	// MinPids: the init (several threads under the Go init) and the command.
	MinPids = 8
	// MinMilliCPUs is the kernel's smallest quota (1 ms) in its 100 ms period.
	MinMilliCPUs = 10
	// pidMaxLimit is the kernel's PID_MAX_LIMIT on 64-bit machines.
	pidMaxLimit = 4 << 20
)

// MemoryLimit resolves --memory s ("": none) against the machine's RAM (ram bytes;
// 0: unknown). A number without a suffix is bytes, as for --tmp-size. The error is
// the reason alone; callers name the flag or the file.
func MemoryLimit(s string, ram int64) (int64, error) {
	if s == "" {
		return 0, nil
	}
	size, err := bytesize.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("%v, e.g. 2G", err)
	}
	if size < MinMemory {
		return 0, fmt.Errorf("%d bytes is below the minimum of 16M (a number without a suffix is bytes)", size)
	}
	if ram > 0 && size > ram {
		return 0, fmt.Errorf("more than this machine's memory (%s): it would bound nothing; give at most that", bytesize.Format(ram))
	}
	return size, nil
}

// PidsLimit resolves --pids s ("": none): a whole number of tasks, from MinPids to
// the kernel's kernel.pid_max (pidMax; 0: unknown).
func PidsLimit(s string, pidMax int64) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || s[0] == '+' || n <= 0 {
		return 0, fmt.Errorf("not a positive whole number of processes, e.g. 512")
	}
	if n < MinPids {
		return 0, fmt.Errorf("%d is below the minimum of %d (threads count, agentbox's init's too)", n, MinPids)
	}
	if pidMax <= 0 {
		pidMax = pidMaxLimit
	}
	if n > pidMax {
		return 0, fmt.Errorf("more than this machine's kernel.pid_max (%d): it would bound nothing; give at most that", pidMax)
	}
	return n, nil
}

// CPULimit resolves --cpus s ("": none) in thousandths of a CPU: a decimal number
// with at most two decimals, from 0.01 to the machine's CPUs (ncpu; 0: unknown).
func CPULimit(s string, ncpu int) (int64, error) {
	if s == "" {
		return 0, nil
	}
	whole, frac, dotted := strings.Cut(s, ".")
	bad := fmt.Errorf("not a number of CPUs with at most two decimals, e.g. 0.5 or 2")
	if whole == "" && !dotted || !digits(whole) || !digits(frac) || dotted && frac == "" || len(frac) > 2 || len(whole) > 9 {
		return 0, bad
	}
	n := int64(0)
	if whole != "" {
		n, _ = strconv.ParseInt(whole, 10, 64)
	}
	milli := n * 1000
	if frac != "" {
		f, _ := strconv.ParseInt((frac + "0")[:2], 10, 64)
		milli += f * 10
	}
	if milli < MinMilliCPUs {
		return 0, fmt.Errorf("%s is below the minimum of 0.01 CPUs", s)
	}
	if ncpu > 0 && milli > int64(ncpu)*1000 {
		return 0, fmt.Errorf("more than this machine's %d CPUs: it would bound nothing; give at most %d", ncpu, ncpu)
	}
	return milli, nil
}

func digits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// FormatCPUs writes thousandths of a CPU as --cpus reads them.
func FormatCPUs(milli int64) string {
	return strconv.FormatFloat(float64(milli)/1000, 'f', -1, 64)
}

// PidMax is kernel.pid_max, 0 when it cannot be read.
func PidMax() int64 {
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// resolveLimits checks the options' limits against this machine.
func resolveLimits(opts Options) (Limits, error) {
	var l Limits
	var err error
	if l.Memory, err = MemoryLimit(opts.Memory, TotalRAM()); err != nil {
		return l, &Error{What: "--memory", Path: opts.Memory, Reason: err.Error()}
	}
	pidMax := int64(0)
	if opts.Pids != "" { // a file read, not paid by a launch without --pids
		pidMax = PidMax()
	}
	if l.Pids, err = PidsLimit(opts.Pids, pidMax); err != nil {
		return l, &Error{What: "--pids", Path: opts.Pids, Reason: err.Error()}
	}
	if l.MilliCPUs, err = CPULimit(opts.CPUs, runtime.NumCPU()); err != nil {
		return l, &Error{What: "--cpus", Path: opts.CPUs, Reason: err.Error()}
	}
	return l, nil
}

// LimitOrder makes a limit comparable for narrowing: none is the largest.
func LimitOrder(v int64) int64 {
	if v <= 0 {
		return math.MaxInt64
	}
	return v
}
