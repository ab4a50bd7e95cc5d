package mounts

import "github.com/agentbox/agentbox/policy"

// socketOps hands each allowed socket in at its own path, read-only (connect(2)
// needs no write access to the mount), after the private /tmp and /run.
func socketOps(p *policy.Policy) []Op {
	var ops []Op
	for _, s := range p.Sockets {
		if s.Bind != s.Path {
			// The directory has no mount point in the private /tmp or /run, and
			// only a writable bind creates one (both backends): it is covered at
			// once by the read-only bind, before anything of the sandbox runs.
			ops = append(ops, Op{Kind: Bind, Source: s.Bind, Dest: s.Bind, Why: "mount point for the socket's directory, covered by the next op"})
		}
		ops = append(ops, Op{Kind: BindRO, Source: s.Bind, Dest: s.Bind, Why: "socket handed in (--allow-socket " + s.Path + ")"})
	}
	return ops
}
