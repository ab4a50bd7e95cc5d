package ucounts

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/mounts"
)

// procUser holds the limits of the reading process's user namespace, one file per
// count (max_inotify_instances, …).
const procUser = "/proc/sys/user"

// hostWideFile is the file that shows the initial user namespace's limit whatever
// namespace reads it: where agentbox itself runs in a nested user namespace (a
// container), its /proc/sys/user shows only that namespace's own limits, and the
// host's may be lower.
//
// A switch, not a map: a package's initialisation stays free of allocations
// (cmd/agentbox's TestPackageInitsStayTrivial).
func hostWideFile(name string) (string, bool) {
	switch name {
	case "max_inotify_instances":
		return "/proc/sys/fs/inotify/max_user_instances", true
	case "max_inotify_watches":
		return "/proc/sys/fs/inotify/max_user_watches", true
	case "max_fanotify_groups":
		return "/proc/sys/fs/fanotify/max_user_groups", true
	case "max_fanotify_marks":
		return "/proc/sys/fs/fanotify/max_user_marks", true
	}
	return "", false
}

// Limits are the session's user limits: for each limit of the launcher's user
// namespace, Share of it, or of the host-wide value where that is lower. The
// namespace counts have no host-wide file; the kernel sets the initial
// namespace's to half of kernel.threads-max at boot, which bounds them here. A
// limit that cannot be read fails: a session without its share could take all.
// Then the resource limits counted per user (rlimitShares).
func Limits() ([]mounts.UserLimit, error) {
	l, err := limits()
	if err != nil {
		return nil, fmt.Errorf("%w; without them a session could take all of the user's inotify instances, namespaces and processes (is the host's /proc mounted whole?)", err)
	}
	return l, nil
}

func limits() ([]mounts.UserLimit, error) {
	names, err := filepath.Glob(filepath.Join(procUser, "max_*"))
	if err != nil || len(names) == 0 {
		return nil, fmt.Errorf("read the user's kernel count limits: no %s/max_* (%v)", procUser, err)
	}
	sort.Strings(names)
	threads, err := readInt("/proc/sys/kernel/threads-max")
	if err != nil {
		return nil, err
	}
	var out []mounts.UserLimit
	for _, path := range names {
		name := filepath.Base(path)
		v, err := readInt(path)
		if err != nil {
			return nil, err
		}
		if wide, ok := hostWideFile(name); ok {
			if w, err := readInt(wide); err == nil {
				v = min(v, w)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return nil, err
			}
		} else if strings.HasSuffix(name, "_namespaces") {
			v = min(v, threads/2)
		}
		l := mounts.UserLimit{Name: name, Max: Share(v)}
		if err := l.Check(); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	tasks, err := taskPool(threads)
	if err != nil {
		return nil, err
	}
	rl, err := rlimitShares(tasks)
	if err != nil {
		return nil, err
	}
	return append(out, rl...), nil
}

// taskPool is how many tasks the whole machine may have: kernel.pid_max of the
// launcher's PID namespace (the host's, or a container's own on Linux 6.14+,
// which still draws on the host's) or kernel.threads-max, whichever is lower.
// Every user's processes and threads draw on it, root's daemons' too.
func taskPool(threads int64) (int64, error) {
	pids, err := readInt("/proc/sys/kernel/pid_max")
	if err != nil {
		return 0, err
	}
	return min(pids, threads), nil
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read the user's kernel count limits: %w", err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read the user's kernel count limits: %s: %w", path, err)
	}
	return v, nil
}
