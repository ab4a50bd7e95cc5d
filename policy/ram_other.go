//go:build !linux

package policy

// TotalRAM is the machine's memory in bytes: unknown off Linux.
func TotalRAM() int64 { return 0 }
