package program

import (
	"errors"
	"fmt"
	"strings"
)

// ErrSourceChanged is why a backend refuses a bind source whose identity is not the
// one the launcher verified (mounts.Op.SourceID): something swapped it in between.
var ErrSourceChanged = errors.New("not the file agentbox checked moments before (swapped meanwhile?); not launching")

// MountError is a failed mount-related system call. It reads like a strace line:
// the operation, source, target, flags by name and the errno, and unwraps to the
// errno so callers can test it.
type MountError struct {
	Op     string
	Source string
	Target string
	Flags  uintptr
	Data   string
	Err    error
	Hint   string // what to do about it, when agentbox knows
}

func (e *MountError) Error() string {
	var b strings.Builder
	b.WriteString(e.Op)
	if e.Source != "" {
		fmt.Fprintf(&b, " %s", e.Source)
	}
	if e.Target != "" {
		if e.Source != "" {
			b.WriteString(" ->")
		}
		fmt.Fprintf(&b, " %s", e.Target)
	}
	if f := flagNames(e.Flags); f != "" {
		fmt.Fprintf(&b, " (%s)", f)
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	if e.Hint != "" {
		fmt.Fprintf(&b, "; %s", e.Hint)
	}
	return b.String()
}

func (e *MountError) Unwrap() error { return e.Err }

var mountFlagNames = []struct {
	bit  uintptr
	name string
}{
	{0x1, "MS_RDONLY"}, {0x2, "MS_NOSUID"}, {0x4, "MS_NODEV"}, {0x8, "MS_NOEXEC"},
	{0x20, "MS_REMOUNT"}, {0x400, "MS_NOATIME"}, {0x800, "MS_NODIRATIME"},
	{0x1000, "MS_BIND"}, {0x4000, "MS_REC"}, {0x40000, "MS_PRIVATE"},
	{0x80000, "MS_SLAVE"}, {0x200000, "MS_RELATIME"},
}

func flagNames(f uintptr) string {
	var names []string
	for _, n := range mountFlagNames {
		if f&n.bit != 0 {
			names = append(names, n.name)
			f &^= n.bit
		}
	}
	if f != 0 {
		names = append(names, fmt.Sprintf("%#x", f))
	}
	return strings.Join(names, "|")
}
