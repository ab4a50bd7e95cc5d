package policy

import (
	"fmt"

	"github.com/agentbox/agentbox/internal/bytesize"
)

// The budget of the sandbox's RAM-backed filesystems (--tmp-size): /tmp, /run,
// /dev, /dev/shm, the HOME overlay's upper layer and the kept agents' private
// directories share one tmpfs that takes at most this many bytes of memory, its
// inodes' included (mounts.BudgetSplit), on both backends, so that a session that
// fills them gets ENOSPC instead of the host running out of memory.
const (
	// MaxDefaultTmpSize caps the default: a quarter of RAM, at most 4 GiB, leaves
	// the host at least three quarters of its memory whatever the session writes.
	MaxDefaultTmpSize = 4 << 30
	// MinTmpSize is the smallest budget accepted: a size meant in megabytes and
	// given without its suffix (bytes) is caught, and the setup has room.
	MinTmpSize = 1 << 20
)

// DefaultTmpSize is the budget when none is given: a quarter of RAM (ram bytes;
// 0: unknown), at most MaxDefaultTmpSize, rounded down to a MiB.
func DefaultTmpSize(ram int64) int64 {
	size := int64(MaxDefaultTmpSize)
	if ram > 0 && ram/4 < size {
		size = max(ram/4&^(1<<20-1), MinTmpSize)
	}
	return size
}

// TmpSize resolves --tmp-size s ("": the default) against the machine's RAM (ram
// bytes; 0: unknown). A budget above RAM is refused: it would bound nothing. The
// error is the reason alone; callers name the flag or the file.
func TmpSize(s string, ram int64) (int64, error) {
	if s == "" {
		return DefaultTmpSize(ram), nil
	}
	size, err := bytesize.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("%v, e.g. 2G", err)
	}
	if size < MinTmpSize {
		return 0, fmt.Errorf("%d bytes is below the minimum of 1M (a number without a suffix is bytes)", size)
	}
	if ram > 0 && size > ram {
		return 0, fmt.Errorf("more than this machine's memory (%s): it would bound nothing; give at most that", bytesize.Format(ram))
	}
	return size, nil
}
