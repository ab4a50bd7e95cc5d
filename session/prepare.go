package session

import (
	"fmt"
	"path/filepath"

	"github.com/agentbox/agentbox/backend"
	"github.com/agentbox/agentbox/gitguard"
	"github.com/agentbox/agentbox/internal/kernel"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/session/leftovers"
)

// prepared is what the preparation step turns a policy into: the mount session with
// every protection the plan carries (protected, pinned and linked-worktree Git
// paths, hidden paths, masked sockets, and, for a launch, the identities the
// backends check again), and what the audit needs of it. The CLI (Run, Plan) and
// the Go API (package sandbox, through RunSession and Plan) get it from prepare
// alone, so that a protection cannot reach one door and miss the other.
type prepared struct {
	s       mounts.Session
	repoID  mounts.FileID
	gitDirs []string // writable Git dirs outside the repository: a linked worktree's common dir
	undo    []func() // what forLaunch set up on the host, undone by close in reverse
}

// prepare looks at the repository and the policy and decides what to protect; it
// writes nothing on the host.
func prepare(cfg *Config, p *policy.Policy, sw *backend.Timer) (*prepared, error) {
	repoID, err := repoIdentity(p.Repo)
	if err != nil {
		return nil, err
	}
	meta, err := linkedWorktree(cfg, p) // worktree.go: before the protected paths, which cover it
	if err != nil {
		return nil, fmt.Errorf("linked worktree: %w", err)
	}
	if err := checkKeptGitDirs(p, meta.roots); err != nil {
		return nil, err
	}
	sw.Mark(host("repo identity, worktree"))
	pr := &prepared{repoID: repoID, gitDirs: meta.roots}
	masks, err := kernel.HostSockets(p)
	if err != nil {
		return nil, err
	}
	pr.s = mounts.Session{HostRoot: mounts.IsHostRoot(), ScopeAbstractUnix: kernel.CanScopeAbstractUnix(),
		DenyPathSockets: kernel.DenyPathSockets(p), MaskSockets: masks, Empty: emptyPaths(p)}
	if p.ReadOnly {
		return pr, nil // readonly.go: nothing to protect, pin or bind writable
	}
	protected, err := gitguard.ProtectedPaths(p.Repo, meta.roots...)
	if err != nil {
		return nil, fmt.Errorf("protect Git paths: %w", err)
	}
	added, err := addDirProtected(p)
	if err != nil {
		return nil, err
	}
	protected = append(protected, added...)
	sw.Mark(host("protected paths"))
	pr.s.Protected, pr.s.GitRW = protected, meta.ops
	pr.s.Pinned = gitguard.PinnedDirs(append(append([]string{p.Repo}, meta.roots...), p.AddDirs...), protected)
	return pr, nil
}

// forDryRun completes the session as --dry-run shows it, writing nothing: the
// --disk-tmp directory and the push guard's staging are named, not made.
func (pr *prepared) forDryRun(cfg *Config, p *policy.Policy) error {
	if p.DiskTmp {
		pr.s.DiskTmp = filepath.Join(p.CacheDir, "tmp", "SESSION")
	}
	pr.s.ExtraRO = pushGuardDryRun(cfg, p)
	return dryRunLookPath(p)
}

// forLaunch completes the session for a launch: it creates what the plan binds and
// is missing (placeholders for protected Git paths, kept paths, hidden paths'
// stand-ins), stages the push guard and the --disk-tmp directory, then checks
// again, right before the plan is built, that what it binds is what was decided on
// (identity.go). The identities seen go into the session as data (SourceIDs); Build
// puts them on the operations. close undoes the staging.
func (pr *prepared) forLaunch(cfg *Config, p *policy.Policy, sw *backend.Timer) error {
	if err := gitguard.EnsurePlaceholders(pr.s.Protected); err != nil {
		return err
	}
	if err := prepareKept(p); err != nil {
		return err
	}
	empty, err := emptySources(p)
	if err != nil {
		return err
	}
	pr.s.Empty = empty
	sw.Mark(host("placeholders"))
	writable := append([]string{p.Repo}, p.AddDirs...)
	for _, op := range pr.s.GitRW {
		writable = append(writable, op.Source)
	}
	guard, err := preparePushGuard(cfg, p, writable)
	if err != nil {
		return err
	}
	pr.undo = append(pr.undo, guard.cleanup)
	pr.s.ExtraRO = guard.ops
	sw.Mark(host("push guard"))
	if p.DiskTmp {
		dir, release, err := leftovers.MakeDiskTmp(p.CacheDir)
		if err != nil {
			return err
		}
		pr.undo = append(pr.undo, release)
		pr.s.DiskTmp = dir
	}
	ids := map[string]mounts.FileID{}
	if err := verifyLaunch(p, pr.repoID, pr.s.Protected, ids); err != nil {
		return err
	}
	if err := keptIdentities(p, ids); err != nil {
		return err
	}
	if err := deviceIdentities(p, ids); err != nil {
		return err
	}
	pr.s.SourceIDs = ids
	return nil
}

// close undoes what forLaunch staged, last first.
func (pr *prepared) close() {
	for i := len(pr.undo) - 1; i >= 0; i-- {
		pr.undo[i]()
	}
	pr.undo = nil
}
