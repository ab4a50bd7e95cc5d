package shadow

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
	"github.com/agentbox/agentbox/internal/treewalk"
)

// Directories. A Git tree holds no directory, so a record alone cannot say which
// directories a session made and which it found (an empty one, or one holding only
// ignored files): undo would remove a directory the user had before the session
// because it is empty afterwards. So the session keeps the launch walk's
// directories, and its end record names the directories the session made
// (dirs_made, with the inode the end walk saw) and those it removed (dirs_gone,
// with their permission bits at the start). Undo removes a made one when it is
// empty and still that inode, never another, and makes a gone one with its start
// bits.

// maxStartDirs bounds the directories a session keeps from its launch walk; past
// it the record names none.
const maxStartDirs = 200_000

// maxDirs bounds the directories an end record names in each list; past it, none.
const maxDirs = 20_000

// DirChange is a directory a session made or removed: its inode's low 32 bits as the end
// walk saw it (made) or its permission bits at the start (gone).
type DirChange struct {
	Path string `json:"path"`
	Ino  uint32 `json:"ino,omitempty"`
	Perm uint16 `json:"perm,omitempty"`
}

// startDirs keeps the permission bits of w's directories by path; nil when w
// cannot stand for the tree or holds too many.
func startDirs(w *treewalk.Walk) map[string]uint16 {
	return startBits(w, maxStartDirs, func(e treewalk.Entry) bool { return e.IsDir() })
}

// endDirs lists the directories of the end walk w that start has not (made) and
// those of start that w has not (gone); ok false when they cannot be known.
func endDirs(start map[string]uint16, w *treewalk.Walk) (made, gone []DirChange, ok bool) {
	if start == nil || w == nil || !w.Complete {
		return nil, nil, false
	}
	seen := make(map[string]bool, len(start))
	for _, e := range w.Entries {
		if !e.IsDir() {
			continue
		}
		if _, had := start[e.Rel]; had {
			seen[e.Rel] = true
			continue
		}
		made = append(made, DirChange{Path: e.Rel, Ino: e.Ino})
	}
	for p, perm := range start {
		if !seen[p] {
			gone = append(gone, DirChange{Path: p, Perm: perm})
		}
	}
	if len(made) > maxDirs || len(gone) > maxDirs {
		return nil, nil, false
	}
	sort.Slice(gone, func(i, j int) bool { return gone[i].Path < gone[j].Path })
	return made, gone, true
}

// dirsOf is what an end record says of the session's directories.
type dirsOf struct {
	Made  []DirChange `json:"dirs_made"`
	Gone  []DirChange `json:"dirs_gone"`
	Known bool        `json:"dirs_known"`
}

// recordedDirs reads what the end record body says of the directories the session
// made (within paths, or holding one of them) and removed (within paths), and the
// start bits of every directory it removed; ok false when it does not know them.
func recordedDirs(body string, paths []string) (made, gone []DirChange, bits map[string]uint16, ok bool) {
	var d dirsOf
	if json.Unmarshal([]byte(body), &d) != nil || !d.Known {
		return nil, nil, nil, false
	}
	holds := func(dir string) bool {
		for _, q := range paths {
			if strings.HasPrefix(q, dir+"/") {
				return true
			}
		}
		return false
	}
	for _, x := range d.Made {
		if checkRecordPath(x.Path) == nil && (underAny(x.Path, paths) || holds(x.Path)) {
			made = append(made, x)
		}
	}
	bits = map[string]uint16{}
	for _, x := range d.Gone {
		if checkRecordPath(x.Path) != nil {
			continue
		}
		bits[x.Path] = x.Perm
		if underAny(x.Path, paths) {
			gone = append(gone, x)
		}
	}
	return made, gone, bits, true
}

// dirPerm is the bits a directory undo makes at p gets: its start bits where the
// record has them, else 0755 within the umask; never set-id or sticky bits, and
// never the umask's alone (under umask 000 a directory would be world-writable).
func (p *UndoPlan) dirPerm(path string) uint32 {
	if bits := p.goneBits[path]; bits != 0 {
		return uint32(bits & 0o777)
	}
	return 0o755 &^ umask()
}

// mkdirs makes every missing directory of rel below root, never through a
// symlink, each with the bits perm gives it, set with fchmod once made (the umask
// does not apply), and returns an O_PATH descriptor of the last one.
func mkdirs(root int, rel string, perm func(string) uint32) (int, error) {
	cur, err := unix.Openat(root, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	path := ""
	for _, c := range splitAll(rel) {
		if path == "" {
			path = c
		} else {
			path += "/" + c
		}
		// Made closed to others; opened with no symlink followed, so a name
		// swapped for one in between is refused, and then chmod'ed to its bits
		// through the descriptor (an O_PATH one takes no fchmod; its /proc link
		// names the directory itself). O_PATH: a parent need not be readable.
		made := unix.Mkdirat(cur, c, 0o700) == nil
		next, err := safepath.OpenBeneath(cur, c, unix.O_PATH|unix.O_DIRECTORY)
		unix.Close(cur)
		if err != nil {
			return -1, fmt.Errorf("%s: %w", path, err)
		}
		if made {
			if err := unix.Fchmodat(unix.AT_FDCWD, safepath.FdPath(next), perm(path), 0); err != nil {
				unix.Close(next)
				return -1, fmt.Errorf("%s: %w", path, err)
			}
		}
		cur = next
	}
	return cur, nil
}

// splitAll is rel's components, without empty ones.
func splitAll(rel string) []string {
	var out []string
	for len(rel) > 0 {
		dir, name := splitPath(rel)
		if name != "" {
			out = append(out, name)
		}
		rel = dir
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// removeMadeDir removes the directory d below root when it is empty and still the
// one the session made (its inode as the end walk saw it); anything else stays.
// It reports whether it is gone.
func removeMadeDir(root int, d DirChange) bool {
	dir, name := splitPath(d.Path)
	dfd, err := safepath.OpenBeneath(root, dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return false
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || uint32(st.Ino) != d.Ino {
		return false
	}
	// rmdir fails unless empty: what was put in it since stays, with it.
	return unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR) == nil
}

// makeGoneDir makes the directory d (and its parents) below root again, with its
// start bits; one already there is left as it is.
func (s *Store) makeGoneDir(root int, p *UndoPlan, d DirChange) error {
	fd, err := mkdirs(root, d.Path, p.dirPerm)
	if err != nil {
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, safepath.ErrSymlink) {
			return errors.New("something else is at its path or a parent's; left as it is")
		}
		return err
	}
	unix.Close(fd)
	return nil
}
