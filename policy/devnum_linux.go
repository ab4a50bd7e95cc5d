package policy

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// deviceNumber is a device node's number, whole and split.
func deviceNumber(fi os.FileInfo) (major, minor uint32, rdev uint64, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, 0, false
	}
	rdev = uint64(st.Rdev) // uint32 on some architectures
	return unix.Major(rdev), unix.Minor(rdev), rdev, true
}
