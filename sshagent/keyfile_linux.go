package sshagent

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// openKeyFile opens path for reading when it leads to a regular file. A symlink is
// followed (dotfile managers link the keys in ~/.ssh), but what it leads to is
// first opened with O_PATH, which opens no device and waits for no FIFO's writer,
// and is opened for reading, through that very descriptor, only once fstat says it
// is a regular file; the read does not block either.
func openKeyFile(path string) (*os.File, error) {
	pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, errNotRegular
	}
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}
