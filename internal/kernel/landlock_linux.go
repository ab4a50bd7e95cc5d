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

// LandlockAccessFSRefer is LANDLOCK_ACCESS_FS_REFER (ABI 2): linking or renaming a
// file into another directory. A ruleset that handles any file-system access denies
// it unless a rule allows it, handled or not.
const LandlockAccessFSRefer = 1 << 13

// LandlockAccessFSResolveUnix is LANDLOCK_ACCESS_FS_RESOLVE_UNIX (Landlock ABI 9,
// Linux 7.1): connect(2) and sendmsg(2) to a path socket are refused (EACCES)
// unless the socket was made inside the domain (or a domain nested in it) or its
// path lies beneath a rule that allows this right.
const LandlockAccessFSResolveUnix = 1 << 16

// LandlockRulePathBeneath is LANDLOCK_RULE_PATH_BENEATH: a rule on a file
// hierarchy, given as struct landlock_path_beneath_attr.
const LandlockRulePathBeneath = 1

// LandlockPathBeneathAttrSize is sizeof(struct landlock_path_beneath_attr): a u64
// of allowed access and an s32 descriptor, packed.
const LandlockPathBeneathAttrSize = 12

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

// CanDenyPathSockets reports whether a sandbox started here can be kept off every
// path socket made outside it but those it is granted (mounts.Session.DenyPathSockets):
// Landlock ABI 9. Without it the host's sockets are found and masked one by one
// (HostSockets), which misses those bound after the launch.
func CanDenyPathSockets() bool { return LandlockABI() >= 9 }

// LandlockRulesetAttr is struct landlock_ruleset_attr as of ABI 6: the file-system
// and network access rights handled, and the scopes.
type LandlockRulesetAttr struct {
	HandledAccessFS, HandledAccessNet, Scoped uint64
}

// LandlockRulesetAttrSize is what landlock_create_ruleset is told the struct's size is.
const LandlockRulesetAttrSize = unsafe.Sizeof(LandlockRulesetAttr{})
