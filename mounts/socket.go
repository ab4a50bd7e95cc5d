package mounts

import "strings"

// PathSocketsLine says, for the dry run, how the plan keeps the command off the
// host's path sockets (P4) and what that costs: Landlock's rule, which also keeps
// the command from mounting, or the masks of the sockets found at launch
// (--nested-sandbox, or a kernel before 7.1), which miss those bound later.
func (p Plan) PathSocketsLine() string {
	if p.DenyPathSockets {
		return "landlock deny resolve-unix  # P4 the host's path sockets unreachable but beneath: " + strings.Join(p.PathSocketGrants, " ") +
			"; the command cannot mount (nested sandboxes need --nested-sandbox)"
	}
	return "sockets  masked at launch  # P4 the host's path sockets found when the session starts are covered (" + MaskSource +
		" binds above); those bound later stay reachable; the command can mount (nested sandboxes)"
}
