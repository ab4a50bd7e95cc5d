//go:build unix

package compat

import (
	"fmt"
	"os"
	"syscall"
)

// hostLower stats an overlay's lower directory on the host (following symlinks, as
// bwrap resolves the source) and applies overlayMode for the calling user.
func hostLower(path string) (uint32, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, fmt.Errorf("overlay source: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("overlay source %s: no owner information", path)
	}
	return overlayMode(uint32(fi.Mode().Perm())|uint32(st.Mode)&0o7000, st.Uid, st.Gid, os.Getuid(), os.Getgid()), nil
}
