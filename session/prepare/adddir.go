package prepare

import (
	"fmt"

	"github.com/agentbox/agentbox/gitguard"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/policy"
)

// --add-dir (issue 16): each further writable directory gets what the repository
// gets from Git's side when it is a work tree: its exec surface bound read-only
// (P7, placeholders included) and the post-session audit, with its own pending
// journal so a killed launcher's audit is run by the next launch that adds it or
// works in it. It gets no metadata snapshot (P8) and no shadow record: those stay
// the repository's.

// addDirProtected lists the protected Git paths of every added directory.
func addDirProtected(p *policy.Policy) ([]mounts.Protected, error) {
	var all []mounts.Protected
	for _, d := range p.AddDirs {
		prot, err := gitguard.ProtectedPaths(d)
		if err != nil {
			return nil, fmt.Errorf("--add-dir %s: protect Git paths: %w", d, err)
		}
		all = append(all, prot...)
	}
	return all, nil
}
