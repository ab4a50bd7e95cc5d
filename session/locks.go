package session

import (
	"fmt"
	"io"
	"os"

	"github.com/agentbox/agentbox/gitguard"
)

// Git updates a file by writing FILE.lock beside it and renaming the lock over it. For
// a protected file the rename fails (a read-only mount point), and some Git commands
// (git branch -d in a linked worktree, for one) then leave the lock behind, which
// makes every later Git command that writes FILE fail on the host. After the session,
// agentbox removes the locks that appeared beside protected files.

// lockPaths are the lock files Git would use for the protected files.
func lockPaths(prot []gitguard.Protected) []string {
	var out []string
	for _, p := range prot {
		if !p.Dir {
			out = append(out, p.Path+".lock")
		}
	}
	return out
}

// existingLocks records which of those locks exist before the session: they belong
// to a Git that was running on the host, not to the sandbox.
func existingLocks(prot []gitguard.Protected) map[string]bool {
	have := map[string]bool{}
	for _, l := range lockPaths(prot) {
		if _, err := os.Lstat(l); err == nil {
			have[l] = true
		}
	}
	return have
}

// removeStaleLocks removes every lock beside a protected file that the session left,
// and says so on w. Only regular files are removed; os.Remove does not follow a
// symlink, and the lock's directory is pinned in the sandbox (gitguard.PinnedDirs).
func removeStaleLocks(w io.Writer, prot []gitguard.Protected, before map[string]bool) {
	for _, l := range lockPaths(prot) {
		if before[l] {
			continue
		}
		fi, err := os.Lstat(l)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if err := os.Remove(l); err == nil {
			fmt.Fprintf(w, "agentbox: removed %s, left by Git when it could not replace the read-only %s\n", l, l[:len(l)-len(".lock")])
		}
	}
}
