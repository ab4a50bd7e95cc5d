package safepath

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// flattenDepth is the nesting at which RemoveAll moves a directory up to the top of
// the tree instead of descending further: each level holds one descriptor, and a
// sandbox can nest directories far deeper than the descriptor limit.
const flattenDepth = 64

// RemoveAll removes path and everything below it, as the owner of the tree, whatever
// the sandbox that made it left there: directories with mode 000 or without x or w
// (they are made 0700 first), FIFOs and sockets (unlinked, never opened), nesting
// deeper than PATH_MAX or the descriptor limit (deep directories are moved up to the
// top first). It never follows a symlink: every step is relative to a descriptor of
// the directory it was checked to be (openat O_NOFOLLOW, O_PATH for the chmod), so a
// link planted anywhere in the tree is removed, not followed. path's parent is
// trusted (the launcher's own cache dir). A missing path is not an error. The error
// names the first entry that could not be removed; RemoveAll goes on with the rest.
func RemoveAll(path string) error {
	path = filepath.Clean(path)
	parent, err := unix.Open(filepath.Dir(path), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("remove %s: open parent: %w", path, err)
	}
	defer unix.Close(parent)
	name := filepath.Base(path)
	var st unix.Stat_t
	if err := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("remove %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return unlinkOne(parent, name, path, false)
	}
	r := &remover{top: -1}
	r.dir(parent, name, path, 0)
	return r.err
}

type remover struct {
	top int // the tree's root directory, where deep directories are moved
	seq int
	err error
}

func (r *remover) fail(path string, err error) {
	if r.err == nil {
		r.err = fmt.Errorf("remove %s: %w", path, err)
	}
}

// dir empties and removes the directory name in parentfd (checked to be one).
func (r *remover) dir(parentfd int, name, path string, depth int) {
	fd, err := openDirForRemoval(parentfd, name)
	if err != nil {
		r.fail(path, err)
		return
	}
	if r.top < 0 {
		r.top = fd
	}
	for {
		names, err := readNames(fd)
		if err != nil {
			r.fail(path, err)
			break
		}
		progress := false
		for _, n := range names {
			p := path + "/" + n
			var st unix.Stat_t
			if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if !errors.Is(err, unix.ENOENT) {
					r.fail(p, err)
				}
				continue
			}
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				if err := unlinkOne(fd, n, p, false); err != nil {
					r.fail(p, err)
				} else {
					progress = true
				}
				continue
			}
			if depth+1 >= flattenDepth && fd != r.top {
				if r.flatten(fd, n) {
					progress = true
					continue
				}
			}
			before := r.err
			r.dir(fd, n, p, depth+1)
			progress = progress || r.err == before
		}
		if len(names) == 0 || !progress {
			break
		}
	}
	if fd != r.top {
		unix.Close(fd)
	}
	if err := unix.Unlinkat(parentfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		r.fail(path, err)
	}
	if fd == r.top {
		unix.Close(fd)
		r.top = -1
	}
}

// flatten moves the directory n in fd up to the tree's root under a fresh name, to
// be removed from there with a short descriptor chain.
func (r *remover) flatten(fd int, n string) bool {
	for i := 0; i < 100; i++ {
		r.seq++
		err := unix.Renameat2(fd, n, r.top, ".agentbox-rm-"+strconv.Itoa(r.seq), unix.RENAME_NOREPLACE)
		if err == nil {
			return true
		}
		if !errors.Is(err, unix.EEXIST) {
			return false
		}
	}
	return false
}

// openDirForRemoval opens the directory name in parentfd for reading, never through
// a symlink, first giving it mode 0700 when its owner lacks any of rwx (a mode-000
// directory, one without x): through an O_PATH descriptor of the directory itself,
// so the chmod cannot be redirected either.
func openDirForRemoval(parentfd int, name string) (int, error) {
	path, err := unix.Openat(parentfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(path)
	var st unix.Stat_t
	if err := unix.Fstat(path, &st); err != nil {
		return -1, err
	}
	if st.Mode&0o700 != 0o700 {
		err := unix.Chmod("/proc/self/fd/"+strconv.Itoa(path), 0o700)
		if errors.Is(err, unix.ENOENT) { // no /proc: the name, checked just above
			err = unix.Fchmodat(parentfd, name, 0o700, 0)
		}
		if err != nil {
			return -1, fmt.Errorf("make it removable: %w", err)
		}
	}
	return unix.Openat(path, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
}

// readNames returns up to a batch of the names in the directory fd, from its start.
func readNames(fd int) ([]string, error) {
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dupCloexec(fd)), "")
	if f == nil {
		return nil, errors.New("dup directory descriptor")
	}
	defer f.Close()
	names, err := f.Readdirnames(4096)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return names, err
}

func dupCloexec(fd int) int {
	d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return d
}

func unlinkOne(fd int, name, path string, dir bool) error {
	flags := 0
	if dir {
		flags = unix.AT_REMOVEDIR
	}
	if err := unix.Unlinkat(fd, name, flags); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}
