package mounts

import "github.com/agentbox/agentbox/policy"

// EmptySources are the empty, read-only stand-ins the launcher keeps for hidden
// paths: a directory and a regular file, bound over each hidden one of that type.
type EmptySources struct {
	Dir, File string
}

// hiddenOps binds an empty stand-in read-only over every hidden path (P11's
// --hide, --hide-secrets): the path is there, and empty; not a symlink trick.
func hiddenOps(p *policy.Policy, e EmptySources) []Op {
	var ops []Op
	for _, h := range p.Hide {
		src := e.File
		if h.Dir {
			src = e.Dir
		}
		ops = append(ops, Op{Kind: BindRO, Source: src, Dest: h.Path, Why: "hidden (" + h.From + "): empty inside"})
	}
	return ops
}
