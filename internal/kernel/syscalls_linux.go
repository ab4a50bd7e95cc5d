package kernel

import (
	"sync"

	"golang.org/x/sys/unix"
)

// Syscalls says which newer system calls the kernel has. It is cheap (three
// failing system calls, once per process), for the launcher to pick fallbacks.
type Syscalls struct {
	Openat2      bool // Linux 5.6
	MountSetattr bool // Linux 5.12
	NewMountAPI  bool // fsopen & co., Linux 5.2
}

var (
	syscallsOnce sync.Once
	syscallsHave Syscalls
)

// DetectSyscalls reports which of the syscalls exist. Each is called with a bad file
// descriptor or empty arguments: ENOSYS means missing, any other answer (EBADF,
// EINVAL, EPERM) means the kernel knows the call. A seccomp filter that answers
// ENOSYS for calls it does not know (Docker's default) counts as missing, which is
// what the launcher needs to know.
func DetectSyscalls() Syscalls {
	syscallsOnce.Do(func() {
		_, err := unix.Openat2(-1, "", &unix.OpenHow{})
		syscallsHave.Openat2 = err != unix.ENOSYS
		err = unix.MountSetattr(-1, "", unix.AT_EMPTY_PATH, &unix.MountAttr{})
		syscallsHave.MountSetattr = err != unix.ENOSYS
		fd, err := unix.Fsopen("", unix.FSOPEN_CLOEXEC)
		if err == nil {
			unix.Close(fd)
		}
		syscallsHave.NewMountAPI = err != unix.ENOSYS
	})
	return syscallsHave
}
