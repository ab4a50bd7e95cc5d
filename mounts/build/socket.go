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
// (what socketOps binds: the socket, or its own directory) and the session's
// writable directories — the repository (unless --read-only), the further ones
// and a linked worktree's metadata — whose sockets the masks left alone too. The
// sandbox's own sockets, wherever it binds them, need no grant; HOME's kept paths
// and the read-only view get none: a socket there is a host process's.
func pathSocketGrants(p *policy.Policy, s mounts.Session) []string {
	var out []string
	for _, sock := range p.Sockets {
		out = append(out, sock.Bind)
	}
	if !p.ReadOnly {
		out = append(out, p.Repo)
	}
	out = append(out, p.AddDirs...)
	for _, op := range s.GitRW {
		out = append(out, op.Dest)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
