package mounts

import "github.com/agentbox/agentbox/policy"

// keptOps binds each kept path writable over the HOME overlay, so that the
// sandbox's writes to it reach the host, and then the read-only directories inside
// them, whose files an agent runs later as the operator.
func keptOps(p *policy.Policy) []Op {
	var ops []Op
	for _, k := range p.Keep {
		ops = append(ops, Op{Kind: Bind, Source: k.Path, Dest: k.Path, Why: "kept (" + k.From + "): writes reach the host"})
	}
	for _, d := range p.KeepReadOnly {
		ops = append(ops, Op{Kind: BindRO, Source: d, Dest: d, Why: "kept agent's exec surface read-only"})
	}
	return ops
}
