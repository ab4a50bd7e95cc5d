package prepare

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"

	"github.com/agentbox/agentbox/mounts"
)

// Git updates a file by writing FILE.lock beside it and renaming the lock over it. For
// a protected file the rename fails (a read-only mount point), and some Git commands
// (git branch -d in a linked worktree, for one) then leave the lock behind, which
// makes every later Git command that writes FILE fail on the host. After the session,
// agentbox removes the locks that appeared beside protected files.

// lockPaths are the lock files Git would use for the protected files.
func lockPaths(prot []mounts.Protected) []string {
	var out []string
	for _, p := range prot {
		if !p.Dir {
			out = append(out, p.Path+".lock")
		}
	}
	return out
}

// ExistingLocks records which of those locks exist before the session: they belong
// to a Git that was running on the host, not to the sandbox.
func ExistingLocks(prot []mounts.Protected) map[string]bool {
	have := map[string]bool{}
	for _, l := range lockPaths(prot) {
		if _, err := os.Lstat(l); err == nil {
			have[l] = true
		}
	}
	return have
}

// RemoveStaleLocks removes every lock beside a protected file that the session left,
// and says so on w. Only regular files are removed, through their directory opened
// without following any symlink (a concurrent session could swap a parent).
func RemoveStaleLocks(w io.Writer, prot []mounts.Protected, before map[string]bool) {
	for _, l := range lockPaths(prot) {
		if before[l] {
			continue
		}
		if err := removeRegularAt(l); err == nil {
			fmt.Fprintf(w, "agentbox: removed %s, left by Git when it could not replace the read-only %s\n", l, l[:len(l)-len(".lock")])
		}
	}
}

// removeRegularAt unlinks path if it is a regular file, resolving its directory with
// no symlink in any component.
func removeRegularAt(path string) error {
	dir, err := safepath.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	name := filepath.Base(path)
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return unix.EISDIR
	}
	return unix.Unlinkat(dir, name, 0)
}
