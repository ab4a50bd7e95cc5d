package trustedexec

import (
	"os"

	"golang.org/x/sys/unix"
)

// Above returns a close-on-exec duplicate of f numbered above every descriptor
// in files by more than os/exec's child moves descriptors before execve
// (syscall.forkAndExecInChild lifts each of the files, and its error pipe, to the
// next number above the highest it is given), so that ExecPath of the result
// still names f when the child executes it. files are every descriptor the child
// gets, /dev/null for an unset stream included. The caller closes the result.
func Above(f *os.File, files []*os.File) (*os.File, error) {
	top := int(f.Fd())
	for _, g := range files {
		top = max(top, int(g.Fd()))
	}
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, top+len(files)+2)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}
