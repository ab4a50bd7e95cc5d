// Package kernel measures which kernel features agentbox can use on this machine, as
// the user who runs it: it does not read version numbers, it tries each feature
// (creates a user namespace in a child process, mounts an overlay inside it, calls
// the new mount syscalls …) and reports what happened, with the fix when something a
// backend needs is missing.
//
// `agentbox doctor` prints the full Report; the native backend uses the cheap
// in-process checks (Syscalls) once per launch to pick its fallbacks, and Explain
// to word a refusal the way doctor does. Probes that need new namespaces run in a
// child process started from the caller's own binary, which must hand control to
// ChildMain when IsChild reports true (see Options.Command).
package kernel

import "strings"

// Names of the checks, as they appear in a Report and in JSON.
const (
	// UserNS: an unprivileged process can create a user namespace with a mount
	// namespace and mount a tmpfs in it (kernel.unprivileged_userns_clone,
	// user.max_user_namespaces and Ubuntu's AppArmor restriction can each forbid it).
	UserNS = "userns"
	// OverlayUserNS: overlayfs can be mounted inside that user namespace (Linux 5.11;
	// Debian's 5.10 only with overlay.permit_mounts_in_userns=1).
	OverlayUserNS = "overlay_userns"
	// OverlayOpaqueDir: in that overlay, a directory from the lower layer can be
	// deleted and created anew, empty. The overlay marks the new one opaque with an
	// xattr on the upper layer, which on tmpfs needs TmpfsUserXattr (or, without
	// userxattr, trusted.* xattrs a user namespace cannot set).
	OverlayOpaqueDir = "overlay_opaque_dir"
	// TmpfsUserXattr: tmpfs accepts user.* extended attributes (Linux 6.6), which an
	// overlay upper directory on tmpfs needs for opaque directories and redirects.
	TmpfsUserXattr = "tmpfs_user_xattr"
	// NewMountAPI: fsopen, fsconfig, fsmount, move_mount and open_tree (Linux 5.2).
	NewMountAPI = "new_mount_api"
	// Openat2: openat2(2) with RESOLVE_ flags (Linux 5.6).
	Openat2 = "openat2"
	// MountSetattr: mount_setattr(2), a recursive read-only remount in one call
	// (Linux 5.12).
	MountSetattr = "mount_setattr"
	// PIDNSProc: a fresh proc can be mounted in a new PID namespace. It fails where
	// /proc has masked paths (containers), which the kernel then refuses to reveal.
	PIDNSProc = "pidns_proc"
	// CgroupNS: a cgroup namespace can be created (Linux 4.6).
	CgroupNS = "cgroupns"
	// Cgroup2: /sys/fs/cgroup is the unified cgroup v2 hierarchy.
	Cgroup2 = "cgroup2"
	// FanotifyFID: an unprivileged fanotify group reporting file handles, with the
	// target's on entry events (Linux 5.17), which the session's end uses to read
	// again only the directories that changed (internal/treewatch).
	FanotifyFID = "fanotify_fid"
	// LandlockAbstractUnix: Landlock ABI 6 (Linux 6.12) scopes abstract Unix
	// sockets, which keeps the command off the host's (X11, D-Bus) without --offline.
	LandlockAbstractUnix = "landlock_abstract_unix"
	// LandlockResolveUnix: Landlock ABI 9 (Linux 7.1) denies connecting to path
	// sockets made outside the sandbox but those granted (CanDenyPathSockets).
	LandlockResolveUnix = "landlock_resolve_unix"
)

// Need says what the native backend does when a check fails.
type Need string

const (
	// Required: no safe fallback; agentbox exec refuses to start without it.
	Required Need = "required"
	// Fallback: the native backend uses an older mechanism that keeps every promise.
	Fallback Need = "fallback"
	// Info: nothing depends on it directly; it is reported because it explains
	// other results.
	Info Need = "info"
)

// Spec describes one check: what it is, which kernel added it, and what the native
// backend does without it.
type Spec struct {
	Name     string
	Title    string // one line, for humans
	Since    string // first mainline kernel with the feature
	Need     Need
	Fallback string // with Need == Fallback: what is used instead
}

// Specs lists every check in the order a Report holds them. Requirements the native
// backend has are written here once, so doctor and the launcher agree.
var Specs = []Spec{
	{UserNS, "unprivileged user namespaces (with a mount in them)", "3.8", Required, ""},
	{OverlayUserNS, "overlayfs in a user namespace", "5.11", Required, ""},
	{PIDNSProc, "proc mount in a new PID namespace (/proc not masked)", "3.8", Required, ""},
	{CgroupNS, "cgroup namespace", "4.6", Required, ""},
	{NewMountAPI, "new mount API (fsopen, fsmount, move_mount, open_tree)", "5.2", Required, ""},
	{Openat2, "openat2 with RESOLVE_NO_SYMLINKS", "5.6", Fallback, "O_PATH walk, one component at a time"},
	{MountSetattr, "mount_setattr (recursive read-only)", "5.12", Fallback, "bind + remount of each mount, keeping its locked flags"},
	{OverlayOpaqueDir, "overlay: replace a deleted directory (rm -rf d && mkdir d in HOME)", "6.6", Info, ""},
	{TmpfsUserXattr, "user.* xattrs on tmpfs (overlay upper dir on tmpfs)", "6.6", Info, ""},
	{Cgroup2, "cgroup v2 at /sys/fs/cgroup", "4.5", Info, ""},
	{FanotifyFID, "unprivileged fanotify with file handles, on TMPDIR's filesystem (watch the working tree during a session)", "5.17", Fallback,
		"the session's end reads the whole working tree again"},
	{LandlockAbstractUnix, "Landlock ABI 6: host abstract Unix sockets (X11, D-Bus) out of reach", "6.12", Fallback,
		"none without --offline or --allow-net: the host's abstract sockets stay reachable (docs/security.md)"},
	{LandlockResolveUnix, "Landlock ABI 9: every host path socket out of reach but those handed in (deny by default)", "7.1", Fallback,
		"enumeration: each host socket bound when a session starts, in every network namespace agentbox can see, is masked; sockets bound later and those in namespaces it cannot see stay reachable (docs/security.md)"},
}

// SpecOf returns the Spec of the named check.
func SpecOf(name string) (Spec, bool) {
	for _, s := range Specs {
		if s.Name == name {
			return s, true
		}
	}
	return Spec{}, false
}

// Check is the measured result of one probe.
type Check struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Detail is what was measured: the failing step and its error, or a note.
	Detail string `json:"detail,omitempty"`
	// Fix says what the user can do about a failed check; empty when nothing can
	// be done short of another kernel.
	Fix string `json:"fix,omitempty"`
}

// Report is the result of Probe.
type Report struct {
	Kernel string  `json:"kernel"` // uname -r
	UID    int     `json:"uid"`    // the user the probes ran as
	Checks []Check `json:"checks"`
	// Sysctls are the values of the knobs that gate user namespaces, as read;
	// missing files are left out.
	Sysctls map[string]string `json:"sysctls,omitempty"`
	// MaskedProc lists mounts found on top of paths inside /proc, the mark of a
	// container runtime's masking.
	MaskedProc []string `json:"masked_proc,omitempty"`
}

// Get returns the named check.
func (r Report) Get(name string) (Check, bool) {
	for _, c := range r.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return Check{}, false
}

// Failed returns the checks that failed and have the given need.
func (r Report) Failed(need Need) []Check {
	var out []Check
	for _, c := range r.Checks {
		s, _ := SpecOf(c.Name)
		if !c.OK && s.Need == need {
			out = append(out, c)
		}
	}
	return out
}

// NativeReady reports whether the native backend can start a sandbox: every
// Required check passed.
func (r Report) NativeReady() bool { return len(r.Failed(Required)) == 0 }

// Refusal is the one-line message the native backend prints when a required feature
// is missing: the same words doctor uses, so a user can search for either.
func (r Report) Refusal() string {
	failed := r.Failed(Required)
	if len(failed) == 0 {
		return ""
	}
	c := failed[0]
	s, _ := SpecOf(c.Name)
	msg := s.Title + " unavailable: " + c.Detail
	if c.Fix != "" {
		msg += "; fix: " + c.Fix
	}
	return strings.TrimSpace(msg) + " (run 'agentbox doctor' for details)"
}

// AtLeast reports whether a kernel release ("6.1.0-50-amd64") is at least version
// ("5.12"), comparing major and minor numbers; ok is false when either does not parse.
func AtLeast(release, version string) (atLeast, ok bool) {
	rMaj, rMin, ok1 := majorMinor(release)
	vMaj, vMin, ok2 := majorMinor(version)
	if !ok1 || !ok2 {
		return false, false
	}
	return rMaj > vMaj || (rMaj == vMaj && rMin >= vMin), true
}

func majorMinor(s string) (major, minor int, ok bool) {
	var n [2]int
	i := 0
	for part := 0; part < 2; part++ {
		start := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			n[part] = n[part]*10 + int(s[i]-'0')
			i++
		}
		if i == start {
			return 0, 0, false
		}
		if part == 0 {
			if i >= len(s) || s[i] != '.' {
				return 0, 0, false
			}
			i++
		}
	}
	return n[0], n[1], true
}
