package nsinit

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// cloneArgs is the kernel's struct clone_args (clone3(2)) up to its cgroup field
// (CLONE_ARGS_SIZE_VER2).
type cloneArgs struct {
	flags      uint64
	_          [3]uint64 // pidfd, child_tid, parent_tid
	exitSignal uint64
	stack      uint64
	stackSize  uint64
	_          [3]uint64 // tls, set_tid, set_tid_size
	cgroup     uint64
}

// The assembly passes 88 as the struct's size (CLONE_ARGS_SIZE_VER2).
var _ = [1]struct{}{}[unsafe.Sizeof(cloneArgs{})-88]

// cgroupArgs are clone3's arguments for a clone with flags (clone(2)'s, the exit
// signal in the low byte) into the cgroup open at fd.
func cgroupArgs(flags uintptr, fd int) *cloneArgs {
	return &cloneArgs{
		flags:      uint64(flags&^0xff) | unix.CLONE_INTO_CGROUP,
		exitSignal: uint64(flags & 0xff),
		cgroup:     uint64(fd),
	}
}
