package kernel

import (
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// LandlockScopeAbstractUnix is LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (Landlock ABI
// 6, Linux 6.12): a process in the domain cannot connect to an abstract Unix
// socket made by a process outside it.
const LandlockScopeAbstractUnix = 1 << 0

// landlockCreateRulesetVersion is LANDLOCK_CREATE_RULESET_VERSION: the call then
// returns the kernel's Landlock ABI.
const landlockCreateRulesetVersion = 1 << 0

// LandlockABI is the running kernel's Landlock ABI version; 0 when Landlock is
// missing or disabled (lsm= without landlock).
var LandlockABI = sync.OnceValue(func() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, landlockCreateRulesetVersion)
	if errno != 0 {
		return 0
	}
	return int(v)
})

// CanScopeAbstractUnix reports whether a sandbox started here can be kept off the
// host's abstract Unix sockets (mounts.Session.ScopeAbstractUnix): Landlock ABI 6.
func CanScopeAbstractUnix() bool { return LandlockABI() >= 6 }

// LandlockRulesetAttr is struct landlock_ruleset_attr as of ABI 6: no file system
// or network access handled, only the abstract-socket scope.
type LandlockRulesetAttr struct {
	HandledAccessFS, HandledAccessNet, Scoped uint64
}

// LandlockRulesetAttrSize is what landlock_create_ruleset is told the struct's size is.
const LandlockRulesetAttrSize = unsafe.Sizeof(LandlockRulesetAttr{})
