package trustedexec

import (
	"bufio"
	"io"
	"strconv"
	"strings"
)

// A filesystem served from user space reports whatever owner and mode its server
// says, and can serve other content on the next read: on it the walk's checks of
// owner and mode (open_linux.go) say nothing about who can change the program. Of the
// filesystems Linux has, FUSE (fuse, fuseblk, virtiofs: one magic number) is the
// one an unprivileged user can mount, mirroring any directory (bindfs), a remote
// host's (sshfs) or an image file, with any owner forced on it. Such a mount is
// trusted only when root mounted it (user_id=0 in its super options): root's
// choice of server, as a root-owned file is root's. Every other filesystem is
// the kernel's, mounted by root, and so is its view of owners: a network or VM
// share (NFS, CIFS, 9p) is trusted as far as the administrator who mounted it
// trusts its server, as the rest of the system is.

// fuseSuperMagic is FUSE_SUPER_MAGIC (linux/magic.h).
const fuseSuperMagic = 0x65735546

// servedBy decides for an entry on a filesystem of type magic (statfs f_type);
// m is its mount's line of mountinfo, ok false when it could not be read. It
// returns "" when the filesystem's word on owners may be trusted, else who
// mounted it, for the refusal.
func servedBy(magic int64, m mount, ok bool) string {
	if magic != fuseSuperMagic {
		return ""
	}
	if !ok {
		return "a user agentbox cannot identify (the mount is not in /proc/self/mountinfo)"
	}
	// virtiofs shares the FUSE magic number but only root mounts it (a virtio
	// device; no user namespace may), and it shows no user_id: a VM share, as 9p.
	// A user's FUSE mount is "fuse" or "fuse.SUBTYPE", never this type.
	if m.fstype == "virtiofs" {
		return ""
	}
	superOpts := m.superOpts
	for _, o := range strings.Split(superOpts, ",") {
		if v, found := strings.CutPrefix(o, "user_id="); found {
			if v == "0" {
				return ""
			}
			if _, err := strconv.ParseUint(v, 10, 32); err == nil {
				return "uid " + v
			}
		}
	}
	return "a user its mount does not name (no user_id)"
}

// mount is what servedBy reads of a mount's line of mountinfo.
type mount struct {
	fstype    string // the filesystem type: "fuse", "fuse.sshfs", "fuseblk", "virtiofs"…
	superOpts string // the super options: the line's last field
}

// mountOf returns the filesystem type and super options of the mount with ID id
// in a /proc/PID/mountinfo listing (proc(5)).
func mountOf(mountinfo io.Reader, id int) (mount, bool) {
	sc := bufio.NewScanner(mountinfo)
	sc.Buffer(nil, 1<<20)
	want := strconv.Itoa(id)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[0] != want {
			continue
		}
		// The optional fields end at "-"; the filesystem type, the source and
		// the super options follow it.
		for i := 6; i < len(f); i++ {
			if f[i] != "-" {
				continue
			}
			if i+3 >= len(f) {
				return mount{}, false
			}
			return mount{fstype: f[i+1], superOpts: f[i+3]}, true
		}
		return mount{}, false
	}
	return mount{}, false
}
