package goinit

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// checkUnprivileged verifies what bwrap promised before the init (its --cap-drop ALL,
// no_new_privs and our seccomp filter): no capability in any set and no_new_privs.
func checkUnprivileged() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("read capabilities: %w", err)
	}
	for _, d := range data {
		if d.Effective|d.Permitted|d.Inheritable != 0 {
			return fmt.Errorf("capabilities left: effective %#x permitted %#x", d.Effective, d.Permitted)
		}
	}
	nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	if err != nil || nnp != 1 {
		return fmt.Errorf("no_new_privs not set (%v)", err)
	}
	return nil
}
