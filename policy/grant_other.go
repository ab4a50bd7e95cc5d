//go:build !linux

package policy

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// inspect is the portable form of grant_linux.go's walk, by path: agentbox launches
// on Linux only, and elsewhere policy is used for its rules.
func inspect(canon string) (inspection, error) {
	var seen inspection
	cur := "/"
	parts := strings.Split(strings.Trim(canon, "/"), "/")
	if canon == "/" {
		parts = nil
	}
	for i := 0; ; i++ {
		last := i == len(parts)
		if why := gitDirPath(cur); why != "" {
			if last {
				seen.leaf = why
			} else if seen.inside == "" {
				seen.inside, seen.why = cur, why
			}
		}
		if last {
			break
		}
		cur = filepath.Join(cur, parts[i])
		fi, err := os.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			seen.missing = cur
			return seen, nil
		}
		if err != nil {
			return seen, err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return seen, errors.New(quote(cur) + " became a symlink while agentbox was starting")
		}
		if !fi.IsDir() {
			return seen, nil
		}
	}
	_, err := os.Lstat(filepath.Join(canon, ".git"))
	seen.dotGit = err == nil
	return seen, nil
}

func gitDirPath(path string) string {
	if isDotGit(filepath.Base(path)) {
		return "named .git"
	}
	if _, err := os.Lstat(filepath.Join(path, "HEAD")); err != nil {
		return ""
	}
	for _, n := range gitShape {
		if _, err := os.Lstat(filepath.Join(path, n)); err == nil {
			return "HEAD beside " + n
		}
	}
	return ""
}
