package policy

import (
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// inspect walks canon (absolute, clean, no symlink in its existing part) from / with
// O_PATH|O_NOFOLLOW, one component at a time, and looks at each directory on the way
// through the descriptor it holds: the answers are all about one resolution of the
// path. A component that is a symlink now was swapped for one after the path was
// resolved: an error.
func inspect(canon string) (inspection, error) {
	var seen inspection
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return seen, err
	}
	defer func() { unix.Close(fd) }()
	parts := strings.Split(strings.Trim(canon, "/"), "/")
	if canon == "/" {
		parts = nil
	}
	cur := "/"
	isDir := true
	for i := 0; ; i++ {
		last := i == len(parts)
		if isDir {
			if why := gitDirAt(fd, cur); why != "" {
				if last {
					seen.leaf = why
				} else if seen.inside == "" {
					seen.inside, seen.why = cur, why
				}
			}
		}
		if last {
			break
		}
		next := filepath.Join(cur, parts[i])
		nfd, err := unix.Openat(fd, parts[i], unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.ENOENT {
			seen.missing = next
			return seen, nil
		}
		if err != nil {
			return seen, fmt.Errorf("open %s: %w", quote(next), err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(nfd, &st); err != nil {
			unix.Close(nfd)
			return seen, fmt.Errorf("stat %s: %w", quote(next), err)
		}
		unix.Close(fd)
		fd, cur = nfd, next
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			return seen, fmt.Errorf("%s became a symlink while agentbox was starting", quote(next))
		case unix.S_IFDIR:
		default:
			if i < len(parts)-1 {
				return seen, fmt.Errorf("%s is not a directory", quote(next))
			}
			isDir = false
		}
		if i == len(parts)-1 {
			seen.id = FileID{Dev: uint64(st.Dev), Ino: st.Ino}
		}
	}
	if canon == "/" {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return seen, err
		}
		seen.id = FileID{Dev: uint64(st.Dev), Ino: st.Ino}
	}
	if isDir {
		var st unix.Stat_t
		seen.dotGit = unix.Fstatat(fd, ".git", &st, unix.AT_SYMLINK_NOFOLLOW) == nil
	}
	return seen, nil
}

// gitDirAt says why the directory fd (at path) is a Git directory, or "".
func gitDirAt(fd int, path string) string {
	if isDotGit(filepath.Base(path)) {
		return "named .git"
	}
	var st unix.Stat_t
	if unix.Fstatat(fd, "HEAD", &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return ""
	}
	for _, n := range gitShape {
		if unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			return "HEAD beside " + n
		}
	}
	return ""
}
