package mounts

import (
	"slices"
	"strings"

	"github.com/agentbox/agentbox/policy"
)

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
		why := "socket handed in (--allow-socket " + s.Path + ")"
		if s.From != "" {
			why = "socket handed in (" + s.From + ")"
		}
		ops = append(ops, Op{Kind: BindRO, Source: s.Bind, Dest: s.Bind, Why: why})
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
func pathSocketGrants(p *policy.Policy, s Session) []string {
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
