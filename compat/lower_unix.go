//go:build unix

package compat

import (
	"fmt"
	"os"
	"syscall"

	"github.com/agentbox/agentbox/overlay"
)

// hostLower stats an overlay's lower directory on the host (following symlinks, as
// bwrap resolves the source) and applies overlay.UpperFor for the calling user,
// whose ids are the ones bwrap maps. bwrap's upper dir is the caller's already, so
// only the mode is given (--chmod).
func hostLower(path string) (uint32, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, fmt.Errorf("overlay source: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("overlay source %s: no owner information", path)
	}
	return overlay.UpperFor(overlay.Attr{UID: st.Uid, GID: st.Gid, Mode: uint32(st.Mode)}, os.Getuid(), os.Getgid()).Mode, nil
}
