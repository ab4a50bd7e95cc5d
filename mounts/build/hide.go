package build

import (
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/policy"
)

// DevNull is the stand-in of a hidden history (policy.Hidden.Discard).
const DevNull = "/dev/null"

// hiddenOps binds an empty stand-in read-only over every hidden path (P11's
// --hide, --hide-secrets): the path is there, and empty; not a symlink trick.
func hiddenOps(p *policy.Policy, e mounts.EmptySources) []mounts.Op {
	var ops []mounts.Op
	for _, h := range p.Hide {
		if h.Discard {
			// A history: /dev/null, whose identity the launch checks as a
			// handed-in device's (its bind keeps device access).
			ops = append(ops, mounts.Op{Kind: mounts.Device, Source: DevNull, Dest: h.Path, Why: "hidden (" + h.From + "): a history, empty inside, writes dropped"})
			continue
		}
		src := e.File
		if h.Dir {
			src = e.Dir
		}
		ops = append(ops, mounts.Op{Kind: mounts.BindRO, Source: src, Dest: h.Path, Why: "hidden (" + h.From + "): empty inside"})
	}
	return ops
}
