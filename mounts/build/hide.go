package build

import (
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/policy"
)

// hiddenOps binds an empty stand-in read-only over every hidden path (P11's
// --hide, --hide-secrets): the path is there, and empty; not a symlink trick.
func hiddenOps(p *policy.Policy, e mounts.EmptySources) []mounts.Op {
	var ops []mounts.Op
	for _, h := range p.Hide {
		src := e.File
		if h.Dir {
			src = e.Dir
		}
		ops = append(ops, mounts.Op{Kind: mounts.BindRO, Source: src, Dest: h.Path, Why: "hidden (" + h.From + "): empty inside"})
	}
	return ops
}
