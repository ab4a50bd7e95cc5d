package gitguard

import (
	"path/filepath"
	"sort"

	"github.com/agentbox/agentbox/internal/hostpath"
)

// PinnedDirs returns the directories that must be mount points in the sandbox so the
// protected paths below them cannot be moved away: every directory strictly between a
// writable root and a protected path (for .git/hooks: .git). A read-only mount on
// .git/config does not stop `mv .git .git.old && mkdir .git`, which carries the mount
// along and leaves a fresh, unprotected .git; the kernel refuses to rename or remove
// a mount point (EBUSY), so binding each such directory onto itself, writable, keeps
// every protected path where Git will look for it. Parents come first.
func PinnedDirs(roots []string, protected []Protected) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range protected {
		root := ""
		for _, r := range roots {
			if hostpath.Within(p.Path, r) && len(r) > len(root) {
				root = r
			}
		}
		if root == "" {
			continue
		}
		for d := filepath.Dir(p.Path); d != root && hostpath.Within(d, root); d = filepath.Dir(d) {
			if !seen[d] {
				seen[d] = true
				out = append(out, d)
			}
		}
	}
	sort.Strings(out)
	return out
}
