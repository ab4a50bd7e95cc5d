package audit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// A file quarantined in place (NAME.agentbox-quarantine-ID) stays inside the
// repository, where another session on it, still running, can rename it back after
// this session's audit said it was moved. QuarantineTo moves it out, into a
// directory of agentbox's state, which no sandbox can reach.

// maxQuarantineCopy bounds the file copied when the quarantine lies on another
// filesystem than the repository (rename(2) gives EXDEV): hooks, configs and todo
// lists are small; a larger file is moved aside in place instead.
const maxQuarantineCopy = 64 << 20

// QuarantineTo moves each finding's item to root/ID/PATH (PATH: its absolute path),
// never replacing a file there; root must lie outside everything a sandbox can write.
// Across filesystems a regular file (up to 64 MiB), a symlink or a FIFO is copied and
// the original removed; anything else, or a failure, falls back to Quarantine's move
// in place, and the finding says why. It fills in Moved or MoveErr.
func QuarantineTo(findings []Finding, id, root string) {
	for i := range findings {
		f := &findings[i]
		if f.Kind == "" {
			continue
		}
		moved, err := quarantineOut(f, id, root)
		if err == nil {
			f.Moved = moved
			continue
		}
		f.Moved, f.MoveErr = quarantine(f, id)
		if f.MoveErr == nil {
			f.Reasons = append(f.Reasons, fmt.Sprintf("kept inside the repository (%v)", err))
		}
	}
}

func quarantineOut(f *Finding, id, root string) (string, error) {
	path := f.Path
	dir, name := filepath.Split(path)
	at := dir // opened beneath the held directory's descriptor when it lies in it
	r := f.relaxer()
	defer r.Restore()
	sfd, err := openParent(filepath.Clean(at), r) // audit_unreadable_linux.go
	if err != nil {
		return "", fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(sfd)
	if err := ownerWritable(r, sfd, filepath.Clean(at), dir); err != nil {
		return "", err
	}
	dest := filepath.Join(root, id, filepath.Clean(path))
	if len(dest) > unix.PathMax-16 {
		dest = filepath.Join(root, id, "long-"+strconv.Itoa(len(path)))
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o700); err != nil {
		return "", err
	}
	dfd, err := unix.Open(filepath.Dir(dest), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(dfd)
	base := filepath.Base(dest)
	for n := 1; n < 100; n++ {
		target := base
		if n > 1 {
			target += "-" + strconv.Itoa(n)
		}
		err := unix.Renameat2(sfd, name, dfd, target, unix.RENAME_NOREPLACE)
		if errors.Is(err, unix.EINVAL) {
			err = renameChecked(sfd, name, dfd, target)
		}
		if errors.Is(err, unix.EXDEV) {
			err = copyOut(sfd, name, dfd, target)
		}
		if err == nil {
			return filepath.Join(filepath.Dir(dest), target), nil
		}
		if !errors.Is(err, unix.EEXIST) {
			return "", err
		}
	}
	return "", fmt.Errorf("every quarantine name for %s is taken", path)
}

// ownerWritable makes the open directory dfd (the scan's path at, reported as
// dir) writable for its owner, for a rename out of it; r's Restore puts its mode
// back, journaled as the scan's widening is (internal/widen).
func ownerWritable(r *relaxer, dfd int, at, dir string) error {
	var st unix.Stat_t
	if err := unix.Fstat(dfd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", dir, err)
	}
	if st.Mode&0o300 == 0o300 {
		return nil
	}
	if err := r.WidenOpen(dfd, at, 0o300); err != nil {
		return fmt.Errorf("make %s writable: %w", dir, err)
	}
	return nil
}

// renameChecked renames where RENAME_NOREPLACE is missing: our own target directory,
// which nothing else writes, is checked first.
func renameChecked(sfd int, name string, dfd int, target string) error {
	var st unix.Stat_t
	err := unix.Fstatat(dfd, target, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == nil {
		return unix.EEXIST
	}
	if !errors.Is(err, unix.ENOENT) {
		return err
	}
	return unix.Renameat(sfd, name, dfd, target)
}

// copyOut copies the entry name of sfd to target in dfd and removes the original,
// if it is still the same inode.
func copyOut(sfd int, name string, dfd int, target string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(sfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		if st.Size > maxQuarantineCopy {
			return fmt.Errorf("another filesystem, and larger than %d bytes", maxQuarantineCopy)
		}
		if err := copyRegular(sfd, name, dfd, target, &st); err != nil {
			return err
		}
	case unix.S_IFLNK:
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(sfd, name, buf)
		if err != nil {
			return err
		}
		if err := unix.Symlinkat(string(buf[:n]), dfd, target); err != nil {
			return err
		}
	case unix.S_IFIFO:
		if err := unix.Mkfifoat(dfd, target, 0o600); err != nil {
			return err
		}
	default:
		return errors.New("another filesystem, and neither a file, a symlink nor a FIFO")
	}
	var now unix.Stat_t
	if err := unix.Fstatat(sfd, name, &now, unix.AT_SYMLINK_NOFOLLOW); err != nil || now.Ino != st.Ino || now.Dev != st.Dev {
		_ = unix.Unlinkat(dfd, target, 0)
		return errors.New("replaced while being copied out")
	}
	return unix.Unlinkat(sfd, name, 0)
}

func copyRegular(sfd int, name string, dfd int, target string, st *unix.Stat_t) error {
	in, err := unix.Openat(sfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	src := os.NewFile(uintptr(in), name)
	defer src.Close()
	out, err := unix.Openat(dfd, target, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	dst := os.NewFile(uintptr(out), target)
	_, err = io.Copy(dst, io.LimitReader(src, st.Size))
	if err == nil {
		err = dst.Chmod(os.FileMode(st.Mode & 0o777 &^ 0o022))
	}
	if err == nil {
		err = dst.Sync()
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = unix.Unlinkat(dfd, target, 0)
	}
	return err
}
