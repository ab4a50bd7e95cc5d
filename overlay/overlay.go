// Package overlay holds the rules of the sandbox's HOME overlay that every executor
// must keep alike: what the upper directory (and so the overlay's root) gets for
// owner and mode, the mount options, and the retry for kernels before 5.11. The
// compiled plan both native inits run (nsinit/program), the bwrap translation
// (compat) and doctor's probe (internal/kernel) all ask it.
//
// It decides nothing about where an overlay goes: that is the plan's (build.Plan).
// It makes no system call: the executors stat, chown, chmod and mount.
package overlay

import (
	"errors"
	"strings"
	"syscall"
)

// The scratch tmpfs an executor mounts at the overlay's destination, which the
// overlay then covers: its two directories and their mode (and the tmpfs root's).
const (
	UpperDir    = "upper"
	WorkDir     = "work"
	ScratchMode = 0o755
)

// Attr is a lower directory's owner, group and mode, as stat(2) gives them
// (st_uid, st_gid, st_mode; bits beyond the permissions are ignored).
type Attr struct {
	UID, GID uint32
	Mode     uint32
}

// Upper is what the upper directory gets. The overlay's root takes its owner and
// mode from the upper dir, so without this HOME would belong to whoever mounted it
// with the scratch tmpfs's mode.
type Upper struct {
	// Chown: give it the lower's owner and group. False when either is not mapped in
	// the sandbox; the upper dir stays the mounter's (the sandbox's own ids).
	Chown bool
	// Mode is the permission bits (with setuid, setgid, sticky) for chmod(2).
	Mode uint32
}

// UpperFor is the upper-dir rule. The sandbox maps exactly uid and gid, the
// launcher's, to themselves (both backends). When the lower belongs to both, the
// upper dir gets its owner and mode as they are. Otherwise the mounter, who owns
// the upper dir, must not gain the owner's rights: owner and group get only what
// others may do (root launching into another user's HOME cannot write it).
func UpperFor(lower Attr, uid, gid int) Upper {
	mode := lower.Mode & 0o7777
	if int64(lower.UID) == int64(uid) && int64(lower.GID) == int64(gid) {
		return Upper{Chown: true, Mode: mode}
	}
	other := mode & 0o7
	return Upper{Mode: mode&^0o770 | other<<6 | other<<3}
}

// userxattr makes overlayfs keep its whiteouts and opaque marks in user.* xattrs,
// which a user namespace may set (Linux 5.11).
const userxattr = ",userxattr"

// Options is the mount data for an overlay of lowers (the first one uppermost) with
// the given upper and work directories, userxattr included. The paths are
// descriptor paths or scratch paths of the executor's: none may contain ',' or ':'.
func Options(lowers []string, upper, work string) string {
	return "lowerdir=" + strings.Join(lowers, ":") + ",upperdir=" + upper + ",workdir=" + work + userxattr
}

// Fallback says how to retry a mount with Options' data that failed with err.
// Before 5.11 overlayfs knows no userxattr and refuses it (EINVAL); where such a
// kernel mounts an overlay in a user namespace at all (Debian's 5.10 with
// overlay.permit_mounts_in_userns=1), it does so without. ok is false when there
// is nothing to retry. Executors that run only on 5.12+ (the raw init) never retry.
func Fallback(data string, err error) (retry string, ok bool) {
	if !errors.Is(err, syscall.EINVAL) || !strings.HasSuffix(data, userxattr) {
		return "", false
	}
	return strings.TrimSuffix(data, userxattr), true
}

// Hint is what to tell the user when the overlay's mount (after Fallback) failed
// with err, or "" when the error says nothing about the kernel's support.
func Hint(err error) string {
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EPERM) {
		return "overlayfs in a user namespace needs Linux 5.11 or later (Debian 5.10: overlay.permit_mounts_in_userns=1); run 'agentbox doctor'"
	}
	return ""
}
