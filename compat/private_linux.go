package compat

import (
	"os"
	"syscall"
)

// privateStage is how bwrap is started: in a user namespace of its own, mapping
// the caller's uid and gid to themselves, and a mount namespace whose every mount
// Go's fork makes private (SysProcAttr.Unshareflags: MS_REC|MS_PRIVATE on "/")
// before it executes bwrap. bwrap's own namespaces are copies of that one, so
// nothing the host mounts during the session propagates into the sandbox: bwrap
// would otherwise make its tree a slave of the host's (MS_SLAVE|MS_REC), and a
// mount the host adds later below a shared mount point would appear inside with the
// host's flags, read-write, after bwrap's read-only pass. bwrap has no option for
// it, and the init it runs cannot change propagation (it runs in a user namespace
// nested below the one that owns the mounts). Cut here, before bwrap copies the
// tree, no mount arrives at any time, also not while bwrap builds it.
//
// bwrap runs as the same uid without capabilities in the namespace (they go at
// execve), so it sees what it sees today, one user namespace deeper.
func privateStage(attr *syscall.SysProcAttr) {
	uid, gid := os.Getuid(), os.Getgid()
	attr.Cloneflags |= syscall.CLONE_NEWUSER
	attr.Unshareflags |= syscall.CLONE_NEWNS
	attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
	attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
	attr.GidMappingsEnableSetgroups = false
}
