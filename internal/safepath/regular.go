package safepath

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// ErrNotRegular is a path that OpenRegularFollow found to lead to anything but a
// regular file (a FIFO, a device, a directory, a socket).
var ErrNotRegular = errors.New("not a regular file")

// OpenRegular opens path for reading only when it is a regular file itself: never
// through a symlink in its last component (a planted link to /dev/zero or to a file
// of the user's), and never blocking, so that a FIFO planted where a file is expected
// cannot hang host-side code. Everything agentbox reads on the host from a place a
// sandbox could have written goes through it.
func OpenRegular(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	return f, nil
}
