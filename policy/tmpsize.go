package policy

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The budget of the sandbox's RAM-backed filesystems (--tmp-size): /tmp, /run,
// /dev, /dev/shm, the HOME overlay's upper layer and the kept agents' private
// directories share one tmpfs of this many bytes on the native backend, so that a
// session that fills them gets ENOSPC instead of the host running out of memory.
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

// ParseSize reads a byte count with an optional binary suffix (K, M, G, T); a
// number without one is bytes, as --git-save-max-size reads it. Zero, negative
// and overflowing counts are refused.
func ParseSize(s string) (int64, error) {
	mult := int64(1)
	num := s
	if n := len(s); n > 0 {
		if i := strings.IndexByte("KkMmGgTt", s[n-1]); i >= 0 {
			mult = 1 << (10 * (i/2 + 1))
			num = s[:n-1]
		}
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v <= 0 || num[0] == '+' || v > math.MaxInt64/mult {
		return 0, fmt.Errorf("not a positive size (a number with an optional suffix K, M, G or T; without one it is bytes)")
	}
	return v * mult, nil
}

// TmpSize resolves --tmp-size s ("": the default) against the machine's RAM (ram
// bytes; 0: unknown). A budget above RAM is refused: it would bound nothing. The
// error is the reason alone; callers name the flag or the file.
func TmpSize(s string, ram int64) (int64, error) {
	if s == "" {
		return DefaultTmpSize(ram), nil
	}
	size, err := ParseSize(s)
	if err != nil {
		return 0, fmt.Errorf("%v, e.g. 2G", err)
	}
	if size < MinTmpSize {
		return 0, fmt.Errorf("%d bytes is below the minimum of 1M (a number without a suffix is bytes)", size)
	}
	if ram > 0 && size > ram {
		return 0, fmt.Errorf("more than this machine's memory (%s): it would bound nothing; give at most that", FormatSize(ram))
	}
	return size, nil
}

// FormatSize writes n bytes the way ParseSize reads them, in the largest unit that
// divides it, or with one decimal in the largest that fits (for messages).
func FormatSize(n int64) string {
	units := "KMGT"
	for i := len(units) - 1; i >= 0; i-- {
		u := int64(1) << (10 * (i + 1))
		switch {
		case n >= u && n%u == 0:
			return strconv.FormatInt(n/u, 10) + units[i:i+1]
		case n >= u:
			return strconv.FormatFloat(float64(n)/float64(u), 'f', 1, 64) + units[i:i+1]
		}
	}
	return strconv.FormatInt(n, 10)
}
