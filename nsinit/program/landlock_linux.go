package program

import (
	"encoding/binary"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/kernel"
	"github.com/agentbox/agentbox/mounts"
)

// landlockRuleset compiles the Landlock ruleset the command runs in (P4) and
// returns its descriptor, or -1 when the plan asks for none. It scopes abstract
// Unix sockets (plan.ScopeAbstractUnix) and, with plan.DenyPathSockets, handles
// LANDLOCK_ACCESS_FS_RESOLVE_UNIX with one rule per grant, each opened beneath the
// sandbox's root without following a symlink. Handling any file-system right makes
// the kernel deny cross-directory links and renames (LANDLOCK_ACCESS_FS_REFER)
// unless a rule allows them, so REFER is handled and allowed beneath "/": they stay
// as they were. It must run while p.root is open, after the mounts, so that each
// rule is tied to what the sandbox sees at that path.
func (p *Program) landlockRuleset(plan mounts.Plan) int {
	if !plan.ScopeAbstractUnix && !plan.DenyPathSockets {
		return -1
	}
	var fsAccess, scoped uint64
	if plan.ScopeAbstractUnix {
		scoped = kernel.LandlockScopeAbstractUnix
	}
	if plan.DenyPathSockets {
		fsAccess = kernel.LandlockAccessFSResolveUnix | kernel.LandlockAccessFSRefer
	}
	d := opDesc{step: "create the Landlock ruleset"}
	attr := p.Words(fsAccess, 0, scoped) // struct landlock_ruleset_attr
	ruleset := p.FdOp(d, unix.SYS_LANDLOCK_CREATE_RULESET, attr, kernel.LandlockRulesetAttrSize, 0)
	if !plan.DenyPathSockets {
		return ruleset
	}
	p.pathBeneath(opDesc{step: "allow links and renames beneath /"}, ruleset, p.root, kernel.LandlockAccessFSRefer)
	for _, g := range plan.PathSocketGrants {
		gd := opDesc{step: "grant path sockets beneath " + g}
		fd := p.openBeneath(gd, g, unix.O_PATH)
		p.pathBeneath(gd, ruleset, fd, kernel.LandlockAccessFSResolveUnix)
		p.CloseFd(fd)
	}
	return ruleset
}

// pathBeneath adds to ruleset a LANDLOCK_RULE_PATH_BENEATH rule allowing access
// beneath the file or directory open at fd.
func (p *Program) pathBeneath(d opDesc, ruleset, fd int, access uint64) {
	attr := make([]byte, kernel.LandlockPathBeneathAttrSize) // struct landlock_path_beneath_attr, packed
	binary.NativeEndian.PutUint64(attr, access)
	binary.NativeEndian.PutUint32(attr[8:], uint32(int32(fd)))
	p.op(d, unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset), kernel.LandlockRulePathBeneath, p.bytes(attr, 8), 0)
}
