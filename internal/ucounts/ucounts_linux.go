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

	"golang.org/x/sys/unix"

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
	// The directory is opened once and its files read beneath it: a path per file
	// walked /proc/sys/user again each time, on the launcher's critical path.
	dir, err := os.Open(procUser)
	if err != nil {
		return nil, fmt.Errorf("read the user's kernel count limits: %w", err)
	}
	defer dir.Close()
	all, err := dir.Readdirnames(-1)
	var names []string
	for _, n := range all {
		if strings.HasPrefix(n, "max_") {
			names = append(names, n)
		}
	}
	if err != nil || len(names) == 0 {
		return nil, fmt.Errorf("read the user's kernel count limits: no %s/max_* (%v)", procUser, err)
	}
	sort.Strings(names)
	dirfd := int(dir.Fd())
	threads, err := readInt("/proc/sys/kernel/threads-max")
	if err != nil {
		return nil, err
	}
	var out []mounts.UserLimit
	for _, name := range names {
		v, err := readIntAt(dirfd, name, filepath.Join(procUser, name))
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
	return readIntAt(unix.AT_FDCWD, path, path)
}

// readIntAt reads the number in the file name below dirfd (path names it in an
// error): a /proc/sys file of a few bytes, read to its end into a buffer on the
// stack, through bare system calls. os.ReadFile adds, for each, an fstat, an
// attempt at the poller, a heap buffer and a second path walk where dirfd spares one.
func readIntAt(dirfd int, name, path string) (int64, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	for err == unix.EINTR {
		fd, err = unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	}
	if err != nil {
		return 0, fmt.Errorf("read the user's kernel count limits: %w", &os.PathError{Op: "open", Path: path, Err: err})
	}
	defer unix.Close(fd)
	var buf [64]byte
	n := 0
	for n < len(buf) {
		k, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("read the user's kernel count limits: %w", &os.PathError{Op: "read", Path: path, Err: err})
		}
		if k == 0 {
			break
		}
		n += k
	}
	if n == len(buf) {
		return 0, fmt.Errorf("read the user's kernel count limits: %s: more than %d bytes, not a number", path, len(buf)-1)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(buf[:n])), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read the user's kernel count limits: %s: %w", path, err)
	}
	return v, nil
}
