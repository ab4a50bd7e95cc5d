package build

import (
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/policy"
)

// keptOps binds each kept path writable over the HOME overlay, so that the
// sandbox's writes to it reach the host, then the read-only directories inside
// them, whose files an agent runs later as the operator, and the private ones,
// whose files a running agent outside executes or sources.
func keptOps(p *policy.Policy) []mounts.Op {
	var ops []mounts.Op
	for _, k := range p.Keep {
		ops = append(ops, mounts.Op{Kind: mounts.Bind, Source: k.Path, Dest: k.Path, Why: "kept (" + k.From + "): writes reach the host"})
	}
	for _, d := range p.KeepReadOnly {
		ops = append(ops, mounts.Op{Kind: mounts.BindRO, Source: d, Dest: d, Why: "kept agent's exec surface read-only"})
	}
	for _, d := range p.KeepPrivate {
		ops = append(ops, mounts.Op{Kind: mounts.Tmpfs, Dest: d, Mode: 0o700, Why: "kept agent's running helpers: private inside"})
	}
	return ops
}
