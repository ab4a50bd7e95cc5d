package mounts

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// UserLimit is one limit on what the launching user's processes in the sandbox,
// and in every namespace nested in it, may hold at once, of a count the kernel
// keeps per user at every level of the user-namespace tree, the host's included
// (ucounts): without it a session could take the user's whole host allowance
// (docs/security.md, "The user's per-user kernel counts"). Two kinds:
//
//   - max_*: the file /proc/sys/user/Name of the sandbox's user namespace
//     (max_inotify_instances, max_user_namespaces, …), which its root writes before
//     dropping its capabilities;
//   - rlimit_*: one of RLimitNames, the resource limit of that name, soft and hard,
//     which the init lowers on itself before the command (no process of the
//     sandbox can raise a hard limit).
type UserLimit struct {
	Name string `json:"name"`
	Max  int64  `json:"max"`
}

// RLimitNames are the resource limits a UserLimit may lower: those the kernel
// counts per user up the tree, and RLIMIT_MEMLOCK, which besides (SHM_LOCK, up
// the tree) bounds the user's one machine-wide count of pinned memory (io_uring's
// rings and registered buffers, MSG_ZEROCOPY) by the caller's own limit.
var RLimitNames = []string{"rlimit_nproc", "rlimit_sigpending", "rlimit_msgqueue", "rlimit_memlock"}

// IsRLimit reports whether the limit is a resource limit rather than a file of
// /proc/sys/user.
func (l UserLimit) IsRLimit() bool { return strings.HasPrefix(l.Name, "rlimit_") }

// Check refuses a name that is neither one file of /proc/sys/user's limits nor
// one of RLimitNames, so that no plan names another path, and a value out of range.
func (l UserLimit) Check() error {
	if l.IsRLimit() {
		if !slices.Contains(RLimitNames, l.Name) {
			return fmt.Errorf("user limit %q: not a resource limit counted per user", l.Name)
		}
		if l.Max < 0 {
			return fmt.Errorf("user limit %s: value %d out of range", l.Name, l.Max)
		}
		return nil
	}
	name, ok := strings.CutPrefix(l.Name, "max_")
	if !ok || name == "" || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz_") != "" {
		return fmt.Errorf("user limit %q: not a /proc/sys/user limit", l.Name)
	}
	if l.Max < 0 || l.Max > 1<<31-1 {
		return fmt.Errorf("user limit %s: value %d out of range", l.Name, l.Max)
	}
	return nil
}

// UserLimitsLine says, for the dry run, what the plan's user limits and pty bound are.
func (p Plan) UserLimitsLine() string {
	if len(p.UserLimits) == 0 && p.PtyMax == 0 {
		return ""
	}
	var parts []string
	for _, l := range p.UserLimits {
		parts = append(parts, fmt.Sprintf("%s=%d", strings.TrimPrefix(l.Name, "max_"), l.Max))
	}
	if p.PtyMax > 0 {
		parts = append(parts, fmt.Sprintf("ptys=%d", p.PtyMax))
	}
	return "limits   " + strings.Join(parts, " ") + "  # the session's share of the user's per-user kernel counts and of the machine's ptys"
}

// DevptsOptions is the mount data of the sandbox's own devpts instance, with max=
// the plan's PtyMax when it is above 0; the native init and bwrap's stage mount it
// alike.
func DevptsOptions(ptyMax int64) string {
	opts := "newinstance,ptmxmode=0666,mode=620"
	if ptyMax > 0 {
		opts += ",max=" + strconv.FormatInt(ptyMax, 10)
	}
	return opts
}
