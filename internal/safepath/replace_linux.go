package safepath

import (
	"os"

	"golang.org/x/sys/unix"
)

// ReplaceAt puts b at name in the directory dfd whole or not at all: written to
// tmp (created with O_EXCL|O_NOFOLLOW and perm, so nothing planted there is
// followed or reused; synced first when sync is set), then renamed over name; tmp
// is removed when a step fails. The caller picks a tmp that cannot be guessed when
// others can write the directory.
func ReplaceAt(dfd int, tmp, name string, b []byte, perm uint32, sync bool) error {
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = f.Write(b)
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dfd, tmp, dfd, name)
	}
	if err != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
	}
	return err
}
