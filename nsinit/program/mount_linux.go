package program

import (
	"bytes"
	"errors"
	"fmt"
	"sort"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/eintr"
	"github.com/agentbox/agentbox/mounts"
)

// The mount-related helpers the compiled plan (compile_linux.go) leans on at run
// time: the source identity check, and the pre-5.12 read-only remount, which needs
// the namespace's mount table as it is when it runs.

// CheckSourceID checks that fd, a source opened for a bind, has the identity want
// (mounts.Op.SourceID; zero: unchecked). An other one is ErrSourceChanged.
func CheckSourceID(fd int, want mounts.FileID) error {
	if want == (mounts.FileID{}) {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if (mounts.FileID{Dev: st.Dev, Ino: st.Ino}) != want {
		return ErrSourceChanged
	}
	return nil
}

// remountTreeRO is the fallback for kernels without mount_setattr: every mount at or
// below dir is remounted read-only, keeping the flags the kernel locks (nosuid,
// nodev, noexec, atime) or the remount is refused. Below "/", the host's whole
// view, every mount is made nodev too, as mount_setattr does it there.
func remountTreeRO(dir string) error {
	targets, err := mountPointsBelow(dir)
	if err != nil {
		return err
	}
	for _, t := range targets {
		var sfs unix.Statfs_t
		if err := unix.Statfs(t, &sfs); err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EACCES) {
				continue // hidden below another mount, or unreachable: not visible either
			}
			return &MountError{Op: "statfs", Target: t, Err: err}
		}
		flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY)
		if dir == "/" {
			flags |= unix.MS_NODEV
		}
		for _, f := range []struct{ st, ms uintptr }{
			{unix.ST_NOSUID, unix.MS_NOSUID}, {unix.ST_NODEV, unix.MS_NODEV},
			{unix.ST_NOEXEC, unix.MS_NOEXEC}, {unix.ST_NOATIME, unix.MS_NOATIME},
			{unix.ST_NODIRATIME, unix.MS_NODIRATIME}, {unix.ST_RELATIME, unix.MS_RELATIME},
		} {
			if uintptr(sfs.Flags)&f.st != 0 {
				flags |= f.ms
			}
		}
		if err := unix.Mount("", t, "", flags, ""); err != nil {
			return &MountError{Op: "remount", Target: t, Flags: flags, Err: err}
		}
	}
	return nil
}

// mountPointsBelow lists the mount points at or below dir, from the namespace's own
// mount table, parents before children. The table is read with plain system calls:
// os.Open of a regular file would start Go's poller, whose two descriptors the
// compiled plan (which predicts every descriptor) does not expect.
func mountPointsBelow(dir string) ([]string, error) {
	table, err := readRaw("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	infos, err := mountinfo.GetMountsFromReader(bytes.NewReader(table), mountinfo.PrefixFilter(dir))
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	out := make([]string, 0, len(infos))
	for _, m := range infos {
		out = append(out, m.Mountpoint)
	}
	sort.Strings(out)
	return out, nil
}

// readRaw reads the whole file at path without os.File (see mountPointsBelow).
func readRaw(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var out []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := eintr.Retry(func() (int, error) { return unix.Read(fd, buf) })
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return out, nil
		}
		out = append(out, buf[:n]...)
	}
}
