package hostpath

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// maxLinks is the kernel's bound on the symlinks one resolution follows (ELOOP).
const maxLinks = 40

// Resolution is where a path leads on the host (Resolve).
type Resolution struct {
	// Path is the path the resolution ends at; where a component is missing
	// (Missing), the path an open would create there (or mkdir -p make).
	Path    string
	Missing bool
	// Links are the symlinks followed, in order, each by its resolved path: the
	// names a writer of their directories could retarget.
	Links []string
}

// Resolve resolves rel beneath dir (a resolved directory; rel may be absolute
// and then starts at "/") one name at a time, as the kernel does, never following
// a link but by reading it. It fails where the end cannot be told: a loop or more
// than 40 links, a component that cannot be looked at, a file used as a
// directory, a ".." below a missing component.
func Resolve(dir, rel string) (Resolution, error) {
	var r Resolution
	cur := dir
	if filepath.IsAbs(rel) {
		cur = "/"
	}
	todo := strings.Split(rel, "/")
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if slices.Contains(todo, "..") {
				return r, &fs.PathError{Op: "resolve", Path: next, Err: errors.New("\"..\" below a missing directory")}
			}
			r.Path, r.Missing = filepath.Join(append([]string{next}, todo...)...), true
			return r, nil
		case err != nil:
			return r, err
		case fi.Mode()&fs.ModeSymlink != 0:
			if len(r.Links) >= maxLinks {
				return r, &fs.PathError{Op: "resolve", Path: next, Err: errors.New("too many levels of symbolic links")}
			}
			target, err := os.Readlink(next)
			if err != nil {
				return r, err
			}
			r.Links = append(r.Links, next)
			if filepath.IsAbs(target) {
				cur = "/"
			}
			todo = append(strings.Split(target, "/"), todo...)
		case !fi.IsDir() && slices.ContainsFunc(todo, func(c string) bool { return c != "" && c != "." }):
			return r, &fs.PathError{Op: "resolve", Path: next, Err: errors.New("not a directory")}
		default:
			cur = next
		}
	}
	r.Path = cur
	return r, nil
}
