package policy

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/internal/hostpath"
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
			// A .git file names its gitdir: one that is, or holds, the path is a
			// Git directory even before it has Git's shape.
			if gd := gitFileTarget(fd, cur); gd != "" && hostpath.Within(canon, gd) && seen.inside == "" && seen.leaf == "" {
				if gd == canon {
					seen.leaf = "named by " + quote(filepath.Join(cur, ".git"))
				} else {
					seen.inside, seen.why = gd, "named by "+quote(filepath.Join(cur, ".git"))
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

// gitFileTarget is the gitdir that the .git file in the directory fd (at dir) names,
// absolute and clean, or "" when there is no such file. It is read without
// following a link or blocking, and only its first line.
func gitFileTarget(fd int, dir string) string {
	f, err := unix.Openat(fd, ".git", unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return ""
	}
	defer unix.Close(f)
	var st unix.Stat_t
	if unix.Fstat(f, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return ""
	}
	buf := make([]byte, 4096)
	n, _ := unix.Read(f, buf)
	if n <= 0 {
		return ""
	}
	line, _, _ := strings.Cut(string(buf[:n]), "\n")
	target, ok := strings.CutPrefix(strings.TrimSpace(line), "gitdir:")
	if target = strings.TrimSpace(target); !ok || target == "" {
		return ""
	}
	if !filepath.IsAbs(target) {
		target = filepath.Join(dir, target)
	}
	return resolveExisting(filepath.Clean(target))
}
