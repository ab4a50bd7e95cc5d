package leftovers

import (
	"os"
	"path/filepath"
	"strings"
	"time"
)

// GitConfigCopyKind is the Kind of a copy of a repository's Git config that
// --hide-secrets showed a session (session/prepare/gitcopy.go, in the cache's
// gitconfig/). A copy holds no credential; gc collects the old ones.
const GitConfigCopyKind = "Git config copy"

// GitConfigCopyAge is how long a copy is kept after it was last written. A launch
// renames a fresh copy onto its name right before its bind (the name's mtime is
// then new), and a bind already made keeps its inode when the name goes, so only
// a launch stalled this long between the two could miss its copy (and fail).
const GitConfigCopyAge = 24 * time.Hour

// collectGitConfigCopies removes the regular files of dir, this user's, last
// written before now-GitConfigCopyAge; a symlink or another kind is left alone.
func collectGitConfigCopies(dir string, dryRun bool, now time.Time) []Leftover {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []Leftover
	uid := os.Geteuid()
	for _, e := range ents {
		path := filepath.Join(dir, e.Name())
		fi, err := os.Lstat(path)
		if err != nil || !fi.Mode().IsRegular() || !ownedBy(path, uid) || now.Sub(fi.ModTime()) < GitConfigCopyAge {
			continue
		}
		if strings.HasPrefix(e.Name(), ".") && now.Sub(fi.ModTime()) < 2*GitConfigCopyAge {
			continue // a copy being written, by a launch however slow
		}
		l := Leftover{Path: path, Kind: GitConfigCopyKind}
		if !dryRun {
			if l.Err = os.Remove(path); l.Err == nil {
				l.Removed = true
			}
		}
		out = append(out, l)
	}
	return out
}
