package safepath

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// OpenRegularFollow opens path for reading when it leads to a regular file,
// through symlinks: for the files a user names that are often links into a
// dotfiles checkout (a public key, an ssh or kube config) and that may still lie
// where a sandbox wrote. What the path leads to is first opened with O_PATH, which
// opens no device (a watchdog is armed by its open, a terminal's is waited on) and
// waits for no FIFO's writer; it is opened for reading, through that very
// descriptor, only once fstat says it is a regular file, and reads do not block.
// Anything else is ErrNotRegular.
func OpenRegularFollow(path string) (*os.File, error) {
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
		return nil, ErrNotRegular
	}
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}
