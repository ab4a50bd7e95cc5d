package treewalk

import (
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Now reads the clock.
func Now() Clock {
	var r, b unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &r)
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &b)
	return Clock{Real: r.Nano(), Boot: b.Nano(), BootID: bootID()}
}

var cachedBootID string

func bootID() string {
	if cachedBootID == "" {
		b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
		cachedBootID = strings.TrimSpace(string(b))
	}
	return cachedBootID
}
