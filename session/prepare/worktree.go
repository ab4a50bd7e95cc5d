package prepare

import (
	"errors"
	"fmt"

	"github.com/agentbox/agentbox/gitguard"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/policy"
)

// gitMetadata is what a linked worktree adds to the sandbox: writable binds of its
// metadata outside the repository, and the extra writable roots the protected-path
// function must cover. The zero value adds nothing.
type gitMetadata struct {
	ops   []mounts.Op // mounts.Session.GitRW
	roots []string    // for gitguard.ProtectedPaths
}

// linkedWorktree prepares the binds that let Git work in a linked worktree: the main
// repository's common dir writable (it holds the worktree's own gitdir), then its
// main worktree's HEAD and index read-only again (gitguard.FindLinkedWorktree says
// why the whole common dir). A gitdir file that fails verification is reported on
// stderr and its metadata stays read-only: the session still runs, but Git cannot
// commit there.
func linkedWorktree(o Options, p *policy.Policy) (gitMetadata, error) {
	w, err := gitguard.FindLinkedWorktree(p.Repo)
	if errors.Is(err, gitguard.ErrWorktreeUnverified) {
		fmt.Fprintf(o.Stderr, "agentbox: linked worktree metadata stays read-only: %v\n", err)
		return gitMetadata{}, nil
	}
	if err != nil || w == nil {
		return gitMetadata{}, err
	}
	// The same rules as for the repository itself (P6): never /, never an ancestor of
	// HOME, /tmp, /run, /proc or /dev.
	if err := policy.CheckRepo(w.CommonDir, p.Home); err != nil {
		fmt.Fprintf(o.Stderr, "agentbox: linked worktree metadata stays read-only: common dir: %v\n", err)
		return gitMetadata{}, nil
	}
	// Nor inside another Git directory (policy/grant.go): a worktree of a submodule
	// has its common dir in the superproject's .git/modules.
	if _, err := policy.CheckGrant("common dir", w.CommonDir, w.CommonDir, policy.GrantGitDir); err != nil {
		fmt.Fprintf(o.Stderr, "agentbox: linked worktree metadata stays read-only: %v\n", err)
		return gitMetadata{}, nil
	}
	m := gitMetadata{roots: []string{w.CommonDir}}
	m.ops = append(m.ops, mounts.Op{Kind: mounts.Bind, Source: w.CommonDir, Dest: w.CommonDir, Why: "linked worktree: Git metadata writable"})
	for _, f := range w.ReadOnly {
		m.ops = append(m.ops, mounts.Op{Kind: mounts.BindRO, Source: f, Dest: f, Why: "linked worktree: main worktree's own state"})
	}
	return m, nil
}
