package leafcg

import (
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Where a limited session's cgroup may go.
//
// A cgroup the caller can write is not yet one it was given: root can write every
// cgroup, and a user a group-writable one someone else made. The limited cgroup goes
// only where the tree was delegated to the caller:
//
//   - a user: a cgroup whose directory and cgroup.procs the user owns, from the
//     launcher's own up, as systemd's delegation chowns the delegated cgroup and
//     everything below it; the climb stops at the first cgroup the user does not own,
//     and at the delegated cgroup itself (systemd marks it, see delegateMark).
//   - root: its own cgroup, or, where systemd marked a cgroup at or above it as
//     delegated (a unit with Delegate=yes), up to that cgroup: never into the slices
//     above, which hold other services.
//   - never the root cgroup.
//
// There, the controllers the limits need must be enabled for its children
// (cgroup.subtree_control) or available (cgroup.controllers) in a cgroup with no
// processes of its own, where the launcher enables them.

// Host is where the calling process is in the cgroup v2 tree, read once per launch
// (Probe) for the check and the session's cgroup.
type Host struct {
	Own   string // the directory of its cgroup2 cgroup; "": no cgroup2 hierarchy holds it here
	Mount string // where the hierarchy Own is found in is mounted
}

// Probe reads /proc/self/cgroup and the mount table.
func Probe() (Host, error) {
	own, mount, err := ownCgroupAndMount()
	return Host{Own: own, Mount: mount}, err
}

// delegateMarks are the extended attributes systemd (since 251) sets on the cgroup of
// a unit with Delegate=yes: trusted.delegate by the system manager, user.delegate by
// a user's. Only root can set a trusted one, only the owner a user one.
var delegateMarks = []string{"trusted.delegate", "user.delegate"}

// delegateMark says whether systemd marked dir as a delegated cgroup.
func delegateMark(dir string) bool {
	buf := make([]byte, 8)
	for _, name := range delegateMarks {
		n, err := unix.Lgetxattr(dir, name, buf)
		if err == nil && strings.TrimSpace(string(buf[:n])) == "1" {
			return true
		}
	}
	return false
}

// ownedBy says whether dir and its cgroup.procs belong to uid.
func ownedBy(dir string, uid int) bool {
	for _, p := range []string{dir, filepath.Join(dir, "cgroup.procs")} {
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil || int(st.Uid) != uid {
			return false
		}
	}
	return true
}

// parentChoice is where the limited cgroup goes, and the controllers the launcher
// enables there first.
type parentChoice struct {
	dir    string
	enable []string
}

// limitParent finds where the session's limited cgroup can be made for uid (the
// rules above), the nearest such cgroup from the launcher's own up.
func limitParent(h Host, uid int, want []string) (parentChoice, error) {
	if h.Own == "" {
		return parentChoice{}, &LimitError{Flag: flagOf(want[0]), Reason: "the host uses cgroup v1 (no cgroup2 hierarchy holds this process)",
			Fix: "boot with systemd.unified_cgroup_hierarchy=1 (cgroup v2), or leave the flag out"}
	}
	rootHas := fields(readFile(filepath.Join(h.Mount, "cgroup.controllers")))
	for _, c := range want {
		if !contains(rootHas, c) {
			return parentChoice{}, &LimitError{Flag: flagOf(c), Reason: fmt.Sprintf("the cgroup v2 hierarchy has no %s controller (a cgroup v1 hierarchy holds it, or the kernel lacks it)", c),
				Fix: "boot with systemd.unified_cgroup_hierarchy=1 and without cgroup_no_v1 for it, or leave the flag out"}
		}
	}
	top := h.Own // root's bound: its own cgroup, or the delegated one above it
	if uid == 0 {
		for d := h.Own; below(d, h.Mount); d = filepath.Dir(d) {
			if delegateMark(d) {
				top = d
				break
			}
		}
	}
	missing := want[0]
	looked := false
	for dir := h.Own; below(dir, h.Mount); dir = filepath.Dir(dir) {
		if uid != 0 && !ownedBy(dir, uid) {
			break
		}
		looked = true
		enable, lacks := controllersAt(dir, want)
		if lacks == "" && unix.Access(dir, unix.W_OK|unix.X_OK) == nil && unix.Access(filepath.Join(dir, "cgroup.procs"), unix.W_OK) == nil {
			return parentChoice{dir: dir, enable: enable}, nil
		}
		if lacks != "" {
			missing = lacks
		}
		if (uid == 0 && dir == top) || (uid != 0 && delegateMark(dir)) {
			break
		}
	}
	fix := fixDelegate
	if uid == 0 {
		fix = fixDelegateRoot
	}
	return parentChoice{}, &LimitError{Flag: flagOf(missing), Reason: notDelegated(h, uid, top, missing, looked), Fix: fix}
}

// fixDelegateRoot is root's way to a delegated cgroup on a systemd host: a service
// with Delegate=yes whose processes run in a subgroup (systemd 254), which leaves
// the service's own cgroup free to give its children the controllers.
const fixDelegateRoot = "run it as a delegated service, e.g. systemd-run -p Delegate=yes -p DelegateSubgroup=agentbox --pty agentbox exec …, or leave the flag out"

// below says whether dir is a cgroup strictly below the hierarchy's root at mount.
func below(dir, mount string) bool {
	if mount == "/" {
		return len(dir) > 1 && dir[0] == '/'
	}
	return len(dir) > len(mount)+1 && strings.HasPrefix(dir, mount+"/")
}

// controllersAt says which of want dir would give a child: those to enable there
// first, or the one it cannot give (not available to it, or available but dir holds
// processes, which the kernel refuses a cgroup that gives domain controllers away).
func controllersAt(dir string, want []string) (enable []string, lacks string) {
	enabled := fields(readFile(filepath.Join(dir, "cgroup.subtree_control")))
	avail := fields(readFile(filepath.Join(dir, "cgroup.controllers")))
	for _, c := range want {
		switch {
		case contains(enabled, c):
		case contains(avail, c):
			enable = append(enable, c)
		default:
			return nil, c
		}
	}
	if len(enable) > 0 && strings.TrimSpace(readFile(filepath.Join(dir, "cgroup.procs"))) != "" {
		return nil, enable[0]
	}
	return enable, ""
}

// notDelegated says why no cgroup was found for missing.
func notDelegated(h Host, uid int, top, missing string, looked bool) string {
	switch {
	case !below(h.Own, h.Mount):
		return fmt.Sprintf("you run in the root cgroup (%s), and no cgroup is delegated to you", h.Own)
	case !looked:
		return fmt.Sprintf("your cgroup (%s) is not delegated to you (it and its cgroup.procs are not yours)", h.Own)
	case uid == 0 && top == h.Own:
		return fmt.Sprintf("as root, the session's cgroup goes only below your own cgroup (%s), or up to the one systemd delegated (trusted.delegate), never into another slice, and yours does not give its children the %s controller (cgroup.subtree_control; a cgroup that holds processes cannot)", h.Own, missing)
	case uid == 0:
		return fmt.Sprintf("as root, the session's cgroup goes only between your own cgroup (%s) and the one systemd delegated (%s), and none of them gives its children the %s controller (cgroup.subtree_control)", h.Own, top, missing)
	}
	return fmt.Sprintf("no cgroup delegated to you (yours, with its cgroup.procs), from yours (%s) up, gives its children the %s controller (cgroup.subtree_control) or can", h.Own, missing)
}
