package nsinit

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/termsafe"
	"github.com/agentbox/agentbox/internal/trustedexec"
)

// initExe is the program a start executes as the init. A named binary is opened
// once, checked on what was opened (trustedexec.Program: its owner, mode, and
// every directory on its way), and executed through that descriptor: a file
// swapped in at its path after the check, by another session that can write the
// directory, is never run.
type initExe struct {
	path string   // what execve is given: /proc/self/exe, or the held file's ExecPath
	name string   // for messages: the binary as named
	file *os.File // the held binary, close-on-exec; nil for /proc/self/exe
}

// selfExe is the running binary itself, whatever happened to its path.
var selfExe = initExe{path: "/proc/self/exe", name: "/proc/self/exe"}

// openInit opens binary ("" the running one) for a start, or takes file, the
// binary opened and checked by the caller already. The caller closes the result
// once the start returned.
func openInit(binary string, file *os.File) (initExe, error) {
	if file == nil {
		// The kernel's own link to the running binary, not a path to walk.
		if binary == "" || binary == selfExe.path {
			return selfExe, nil
		}
		o, err := trustedexec.Program(binary, "agentbox")
		if err != nil {
			return initExe{}, fmt.Errorf("init binary %s: %w", termsafe.Quote(binary), err)
		}
		defer o.File.Close()
		file = o.File
	}
	fd, err := unix.FcntlInt(file.Fd(), unix.F_DUPFD_CLOEXEC, execFdFloor)
	if err != nil {
		return initExe{}, fmt.Errorf("init binary %s: %w", termsafe.Quote(binary), err)
	}
	f := os.NewFile(uintptr(fd), binary)
	return initExe{path: trustedexec.ExecPath(fd), name: binary, file: f}, nil
}

// execFdFloor keeps the held binary's descriptor clear of the init's own
// (0..controlFd), which the start places before execve.
const execFdFloor = 16

func (e initExe) close() {
	if e.file != nil {
		e.file.Close()
	}
}
