package mounts

import (
	"fmt"
	"strings"
)

// UserLimit is one limit of the sandbox's user namespace on what the launching
// user's processes in it, and in every namespace nested in it, may hold at once:
// the file /proc/sys/user/Name of that namespace (max_inotify_instances,
// max_user_namespaces, …), which its root writes before dropping its
// capabilities. The kernel counts these per user at every level of the
// user-namespace tree, the host's included (ucounts), so a lower limit here
// keeps the session from taking the user's whole host allowance (docs/security.md,
// "The user's per-user kernel counts").
type UserLimit struct {
	Name string `json:"name"`
	Max  int64  `json:"max"`
}

// Check refuses a name that is not one file of /proc/sys/user's limits, so that
// no plan names another path, and a negative or out-of-range value.
func (l UserLimit) Check() error {
	name, ok := strings.CutPrefix(l.Name, "max_")
	if !ok || name == "" || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz_") != "" {
		return fmt.Errorf("user limit %q: not a /proc/sys/user limit", l.Name)
	}
	if l.Max < 0 || l.Max > 1<<31-1 {
		return fmt.Errorf("user limit %s: value %d out of range", l.Name, l.Max)
	}
	return nil
}

// UserLimitsLine says, for the dry run, what the plan's user limits are.
func (p Plan) UserLimitsLine() string {
	if len(p.UserLimits) == 0 {
		return ""
	}
	parts := make([]string, len(p.UserLimits))
	for i, l := range p.UserLimits {
		parts[i] = fmt.Sprintf("%s=%d", strings.TrimPrefix(l.Name, "max_"), l.Max)
	}
	return "limits   " + strings.Join(parts, " ") + "  # the session's share of the user's per-user kernel counts"
}
