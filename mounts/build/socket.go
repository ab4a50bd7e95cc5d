package build

import (
	"slices"

	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/policy"
)

// socketOps hands each allowed socket in at its own path, read-only (connect(2)
// needs no write access to the mount), after the private /tmp and /run.
func socketOps(p *policy.Policy) []mounts.Op {
	var ops []mounts.Op
	for _, s := range p.Sockets {
		if s.Bind != s.Path {
			// The directory has no mount point in the private /tmp or /run, and
			// only a writable bind creates one (both backends): it is covered at
			// once by the read-only bind, before anything of the sandbox runs.
			ops = append(ops, mounts.Op{Kind: mounts.Bind, Source: s.Bind, Dest: s.Bind, Why: "mount point for the socket's directory, covered by the next op"})
		}
		why := "socket handed in (--allow-socket " + s.Path + ")"
		if s.From != "" {
			why = "socket handed in (" + s.From + ")"
		}
		ops = append(ops, mounts.Op{Kind: mounts.BindRO, Source: s.Bind, Dest: s.Bind, Why: why})
	}
	return ops
}

// pathSocketGrants are the trees in which a plan with DenyPathSockets lets the
// command reach sockets made outside its Landlock domain: the sockets handed in
// (what socketOps binds: the socket, or its own directory). The sandbox's own
// sockets, wherever it binds them, need no grant; the writable directories, HOME's
// kept paths and the read-only view get none: a socket made outside the sandbox
// there is a host process's (a project's own database in the repository), which
// --allow-socket hands in when wanted.
func pathSocketGrants(p *policy.Policy) []string {
	var out []string
	for _, sock := range p.Sockets {
		out = append(out, sock.Bind)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
