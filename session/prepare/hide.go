package prepare

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/policy"
)

// emptySources makes sure CACHE/empty/{dir,file} exist, are empty and are not
// links (mode 0500 and 0400), and returns them; the sandbox never reaches them
// (HOME is an overlay inside, and no kept path holds the cache dir).
func emptySources(p *policy.Policy) (mounts.EmptySources, error) {
	e := emptyPaths(p)
	if len(p.Hide) == 0 {
		return e, nil
	}
	parent := filepath.Dir(e.Dir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return e, fmt.Errorf("--hide: %w", err)
	}
	dfd, err := safepath.Open(parent, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return e, fmt.Errorf("--hide: %s: %w", parent, err)
	}
	defer unix.Close(dfd)
	if err := unix.Mkdirat(dfd, "dir", 0o500); err != nil && !errors.Is(err, unix.EEXIST) {
		return e, fmt.Errorf("--hide: %s: %w", e.Dir, err)
	}
	if fd, err := unix.Openat(dfd, "file", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o400); err == nil {
		unix.Close(fd)
	} else if !errors.Is(err, unix.EEXIST) {
		return e, fmt.Errorf("--hide: %s: %w", e.File, err)
	}
	for _, c := range []struct {
		name string
		dir  bool
	}{{"dir", true}, {"file", false}} {
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, c.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return e, fmt.Errorf("--hide: %s: %w", filepath.Join(parent, c.name), err)
		}
		ok := !c.dir && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size == 0
		if c.dir && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			ents, err := os.ReadDir(e.Dir)
			ok = err == nil && len(ents) == 0
		}
		if !ok {
			return e, fmt.Errorf("--hide: %s is not an empty %s; remove it", filepath.Join(parent, c.name), map[bool]string{true: "directory", false: "file"}[c.dir])
		}
	}
	return e, nil
}

// emptyPaths are where emptySources keeps the stand-ins (for --dry-run too).
func emptyPaths(p *policy.Policy) mounts.EmptySources {
	return mounts.EmptySources{Dir: filepath.Join(p.CacheDir, "empty", "dir"), File: filepath.Join(p.CacheDir, "empty", "file")}
}
