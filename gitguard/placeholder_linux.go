package gitguard

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
)

// EnsurePlaceholders creates, on the host, an empty directory or file for each
// protected path that does not exist yet, so that a read-only mount can cover it and
// the sandbox cannot create it (no new hooks/pre-commit, no new config). The parent
// is opened without following symlinks, and the entry is created with O_EXCL, so a
// link planted in the repository cannot send the creation elsewhere.
func EnsurePlaceholders(paths []Protected) error {
	for _, p := range paths {
		if p.Exists {
			continue
		}
		parent, err := safepath.Open(filepath.Dir(p.Path), unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return fmt.Errorf("open %s: %w", filepath.Dir(p.Path), err)
		}
		name := filepath.Base(p.Path)
		if p.Dir {
			err = unix.Mkdirat(parent, name, 0o755)
		} else {
			var fd int
			fd, err = unix.Openat(parent, name, unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
			if err == nil {
				unix.Close(fd)
			}
		}
		unix.Close(parent)
		if err != nil && err != unix.EEXIST {
			return fmt.Errorf("create placeholder %s: %w", p.Path, err)
		}
	}
	return nil
}
