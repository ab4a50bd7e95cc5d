package policy

import "golang.org/x/sys/unix"

// TotalRAM is the machine's memory in bytes (sysinfo(2)), 0 when unknown.
func TotalRAM() int64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}
