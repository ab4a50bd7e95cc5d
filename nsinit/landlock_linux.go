package nsinit

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/mounts"
)

// scopeAbstractUnix puts the calling thread, and so the command forked from it, in
// a Landlock domain that cannot connect to abstract Unix sockets made outside it
// (mounts.Plan.ScopeAbstractUnix): the host's X11, D-Bus and other abstract
// sockets, which the shared network namespace would otherwise hand the sandbox.
// Sockets the session makes itself stay reachable from inside. It needs
// no_new_privs, set before (dropPrivileges, or bwrap's). The thread must be locked.
func scopeAbstractUnix() error {
	attr := mounts.LandlockRulesetAttr{Scoped: mounts.LandlockScopeAbstractUnix}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), mounts.LandlockRulesetAttrSize, 0)
	if errno != 0 {
		return fmt.Errorf("landlock_create_ruleset (abstract Unix socket scope): %w", errno)
	}
	defer unix.Close(int(fd))
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); errno != 0 {
		return fmt.Errorf("landlock_restrict_self: %w", errno)
	}
	return nil
}
