package ucounts

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/mounts"
)

// procSys is where the kernel's settings are read: every file below it is opened
// beneath one descriptor of it. procUser, below it, holds the limits of the reading
// process's user namespace, one file per count (max_inotify_instances, …).
const (
	procSys  = "/proc/sys"
	procUser = procSys + "/user"
)

// hostWideFile is the file below /proc/sys that shows the initial user namespace's limit whatever
// namespace reads it: where agentbox itself runs in a nested user namespace (a
// container), its /proc/sys/user shows only that namespace's own limits, and the
// host's may be lower.
//
// A switch, not a map: a package's initialisation stays free of allocations
// (cmd/agentbox's TestPackageInitsStayTrivial).
func hostWideFile(name string) (string, bool) {
	switch name {
	case "max_inotify_instances":
		return "fs/inotify/max_user_instances", true
	case "max_inotify_watches":
		return "fs/inotify/max_user_watches", true
	case "max_fanotify_groups":
		return "fs/fanotify/max_user_groups", true
	case "max_fanotify_marks":
		return "fs/fanotify/max_user_marks", true
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
	// /proc/sys and its user directory are opened once and every file is read
	// beneath them: a path per file walked /, proc and sys again each time, on the
	// launcher's critical path. The directory's names are taken from its raw
	// entries, in a buffer on the stack: os.File's listing takes a fresh 8 KiB
	// buffer, page faults in a fresh process.
	sys, err := openDir(unix.AT_FDCWD, procSys)
	if err != nil {
		return nil, fmt.Errorf("read the user's kernel count limits: %w", err)
	}
	defer unix.Close(sys)
	user, err := openDir(sys, "user")
	if err != nil {
		return nil, fmt.Errorf("read the user's kernel count limits: %w", &os.PathError{Op: "open", Path: procUser, Err: err})
	}
	defer unix.Close(user)
	names, err := limitNames(user)
	if err != nil || len(names) == 0 {
		return nil, fmt.Errorf("read the user's kernel count limits: no %s/max_* (%v)", procUser, err)
	}
	sort.Strings(names)
	threads, err := readSys(sys, "kernel/threads-max")
	if err != nil {
		return nil, err
	}
	out := make([]mounts.UserLimit, 0, len(names)+len(mounts.RLimitNames))
	for _, name := range names {
		v, err := readIntAt(user, name, procUser)
		if err != nil {
			return nil, err
		}
		if wide, ok := hostWideFile(name); ok {
			if w, err := readSys(sys, wide); err == nil {
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
	tasks, err := taskPool(sys, threads)
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
func taskPool(sys int, threads int64) (int64, error) {
	pids, err := readSys(sys, "kernel/pid_max")
	if err != nil {
		return 0, err
	}
	return min(pids, threads), nil
}

func readInt(path string) (int64, error) {
	return readIntAt(unix.AT_FDCWD, path, "")
}

// readSys reads the number in the file rel below /proc/sys, sys a descriptor of it.
func readSys(sys int, rel string) (int64, error) {
	return readIntAt(sys, rel, procSys)
}

// openDir opens the directory name below dirfd, following no final symlink.
func openDir(dirfd int, name string) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// openFile opens name below dirfd for reading, its path ended in a buffer on the
// stack rather than a copy on the heap (unix.Openat's) where it fits.
func openFile(dirfd int, name string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOCTTY
	var path [256]byte
	if len(name) >= len(path) || strings.IndexByte(name, 0) >= 0 {
		for {
			fd, err := unix.Openat(dirfd, name, flags, 0)
			if err != unix.EINTR {
				return fd, err
			}
		}
	}
	copy(path[:], name)
	for {
		fd, _, e := unix.Syscall6(unix.SYS_OPENAT, uintptr(dirfd), uintptr(unsafe.Pointer(&path[0])), flags, 0, 0, 0)
		switch e {
		case 0:
			return int(fd), nil
		case unix.EINTR:
			continue
		}
		return -1, e
	}
}

// limitNames lists the names beginning "max_" in the directory dirfd, from its raw
// entries (getdents64) read into a buffer on the stack.
func limitNames(dirfd int) ([]string, error) {
	names := make([]string, 0, 16) // Linux 6.x has 12
	var buf [2048]byte
	for {
		n, err := unix.Getdents(dirfd, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return names, nil
		}
		for recs := buf[:n]; len(recs) > 0; {
			const nameOff = 19 // d_ino 8, d_off 8, d_reclen 2, d_type 1
			if len(recs) < nameOff {
				return nil, errors.New("a directory entry the kernel cut short")
			}
			reclen := int(binary.NativeEndian.Uint16(recs[16:]))
			if reclen <= nameOff || reclen > len(recs) {
				return nil, errors.New("a directory entry the kernel cut short")
			}
			name := recs[nameOff:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if bytes.HasPrefix(name, []byte("max_")) {
				names = append(names, string(name))
			}
			recs = recs[reclen:]
		}
	}
}

// readIntAt reads the number in the file name below dirfd (dir/name, or name
// alone where dir is "", names it in an error, and only there is that path
// built): a /proc/sys file of a few bytes, read to its end into a buffer on the
// stack, through bare system calls. os.ReadFile adds, for each, an fstat, an
// attempt at the poller, a heap buffer and a second path walk where dirfd spares one.
func readIntAt(dirfd int, name, dir string) (int64, error) {
	path := func() string {
		if dir == "" {
			return name
		}
		return dir + "/" + name
	}
	fd, err := openFile(dirfd, name)
	if err != nil {
		return 0, fmt.Errorf("read the user's kernel count limits: %w", &os.PathError{Op: "open", Path: path(), Err: err})
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
			return 0, fmt.Errorf("read the user's kernel count limits: %w", &os.PathError{Op: "read", Path: path(), Err: err})
		}
		if k == 0 {
			break
		}
		n += k
	}
	if n == len(buf) {
		return 0, fmt.Errorf("read the user's kernel count limits: %s: more than %d bytes, not a number", path(), len(buf)-1)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(buf[:n])), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read the user's kernel count limits: %s: %w", path(), err)
	}
	return v, nil
}
