package trustedexec

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// served refuses the entry open at fd (at p) when it lies on a filesystem whose
// owners and modes an unprivileged server reports (served.go).
func (w *walker) served(fd int, p string) error {
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return &os.PathError{Op: "statfs", Path: p, Err: err}
	}
	if int64(sfs.Type) != fuseSuperMagic {
		return nil
	}
	var m mount
	ok := false
	if id, err := mountID(fd); err == nil {
		if f, err := os.Open("/proc/self/mountinfo"); err == nil {
			m, ok = mountOf(f, id)
			f.Close()
		}
	}
	if who := servedBy(int64(sfs.Type), m, ok); who != "" {
		return &Untrusted{Reason: fmt.Sprintf("%s lies on a FUSE filesystem mounted by %s, not root: its server reports any owner and mode and can serve other content at any time, so no one can tell who may change %s there; install %s on a local filesystem (or one root mounted)", quote(p), who, w.what, w.what), Served: true}
	}
	return nil
}

// mountID is the ID of the mount the file open at fd lies on (proc(5): fdinfo's
// mnt_id, as in mountinfo's first field).
func mountID(fd int) (int, error) {
	f, err := os.Open("/proc/self/fdinfo/" + strconv.Itoa(fd))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "mnt_id:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("fdinfo of descriptor %d names no mount", fd)
}
