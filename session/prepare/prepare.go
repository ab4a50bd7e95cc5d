// Package prepare is a session's one preparation step: it turns a policy into
// everything a launch needs on the host — the mount session with the protected,
// pinned and linked-worktree Git paths, hidden paths, masked sockets, the push
// guard's binds and the identities the backends check again — and builds the plan
// from it. The CLI and the Go API (package session, for both) get a launch's
// protections from here alone, so that one cannot have what the other misses.
package prepare

import (
	"fmt"
	"github.com/agentbox/agentbox/internal/leafcg"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/gitguard"
	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/kernel"
	"github.com/agentbox/agentbox/internal/stack"
	"github.com/agentbox/agentbox/internal/ucounts"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/mounts/build"
	"github.com/agentbox/agentbox/nsinit"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/session/leftovers"
)

// Prepared is what the preparation step turns a policy into: the mount session with
// every protection the plan carries (protected, pinned and linked-worktree Git
// paths, hidden paths, masked sockets, and, for a launch, the identities the
// backends check again), and what the audit needs of it. The CLI (Run, Plan) and
// the Go API (package sandbox, through RunSession and Plan) get it from prepare
// alone, so that a protection cannot reach one door and miss the other.
type Prepared struct {
	Session mounts.Session
	repoID  mounts.FileID
	GitDirs []string // writable Git dirs outside the repository: a linked worktree's common dir
	undo    []func() // what ForLaunch set up on the host, undone by close in reverse
	sockets *hostSockets
	cgroup  leafcg.Host
	// probeCgroup: New did not read where this process is in the cgroup tree
	// (a session without resource limits); readLimits does.
	probeCgroup bool
	// gitCopies: the copies of the repository's Git configs without their
	// credentials (--hide-secrets, gitcopy.go), written by Placeholders.
	gitCopies []gitConfigCopy
	// Notes are the lines for the user at launch: one per credential entry left
	// out of a copy.
	Notes []string
}

// hostSockets is the host socket scan (kernel.HostSockets) while it runs. It
// reads /proc (a stat of every process's socket table), needs nothing of the steps
// after it, and only the plan needs its masks: it runs beside the protected paths,
// the placeholders, the audit's baseline and the push guard's staging, and ForLaunch
// (ForDryRun) takes its result, failing as New failed when the scan ran inside it.
type hostSockets struct {
	done  chan struct{}
	masks []string
	err   error
}

func scanHostSockets(s kernel.SocketScope) *hostSockets {
	h := &hostSockets{done: make(chan struct{})}
	go func() {
		stack.To8K() // the scan's reads and allocations need it on most launches
		defer close(h.done)
		h.masks, h.err = kernel.HostSockets(s)
	}()
	return h
}

// takeSockets waits for the scan and puts its masks in the session.
func (pr *Prepared) takeSockets() error {
	<-pr.sockets.done
	pr.Session.MaskSockets = pr.sockets.masks
	return pr.sockets.err
}

// userLimits and ptyMax read the host's limits; variables for the tests.
var (
	userLimits = ucounts.Limits
	ptyMax     = ucounts.PtyMax
)

// readLimits reads the session's user limits and its share of the pty pool
// (ucounts), and where this process is in the cgroup tree when New left that:
// files of /proc that only the plan and SessionCgroup need. ForLaunch (ForDryRun)
// reads them once the placeholders have let the audit's baseline start, not New
// before it; one that cannot be read refuses the launch there, before its gate.
// On the calling goroutine, not one of their own: beside the walk's workers, a
// goroutine of their own would wait for a processor they hold.
func (pr *Prepared) readLimits() error {
	if pr.probeCgroup {
		cg, err := leafcg.Probe()
		if err != nil {
			return err
		}
		pr.cgroup, pr.probeCgroup = cg, false
	}
	limits, err := userLimits()
	if err != nil {
		return err
	}
	ptys, err := ptyMax()
	if err != nil {
		return err
	}
	pr.Session.UserLimits, pr.Session.PtyMax = limits, ptys
	return nil
}

// Options are what the preparation needs of the session beyond its policy.
type Options struct {
	AllowGitPush bool      // P9 push guard off (pushguard.go)
	Stderr       io.Writer // warnings: a linked worktree's metadata left read-only
	// Mark, when set, times the step that just ended (the session's host timings).
	Mark func(step string)
}

func (o Options) mark(step string) {
	if o.Mark != nil {
		o.Mark(step)
	}
}

// New looks at the repository and the policy and decides what to protect, and
// starts the host socket scan (hostSockets); it writes nothing on the host.
func New(o Options, p *policy.Policy) (*Prepared, error) {
	// Limits this host cannot enforce refuse the launch before any host work. Where
	// this process is in the cgroup tree is read once, for this and SessionCgroup;
	// without limits nothing here depends on it, and readLimits reads it later.
	var cg leafcg.Host
	lim := limitsOf(p)
	if lim.Set() {
		var err error
		if cg, err = leafcg.Probe(); err != nil {
			return nil, err
		}
		if err := cg.Check(lim); err != nil {
			return nil, err
		}
	}
	repoID, err := repoIdentity(p.Repo)
	if err != nil {
		return nil, err
	}
	meta, err := linkedWorktree(o, p) // worktree.go: before the protected paths, which cover it
	if err != nil {
		return nil, fmt.Errorf("linked worktree: %w", err)
	}
	if err := checkKeptGitDirs(p, meta.roots); err != nil {
		return nil, err
	}
	o.mark(("repo identity, worktree"))
	pr := &Prepared{repoID: repoID, GitDirs: meta.roots, cgroup: cg, sockets: scanHostSockets(socketScope(p, meta.ops)), probeCgroup: !lim.Set()}
	pr.Session = mounts.Session{HostRoot: mounts.IsHostRoot(), ScopeAbstractUnix: kernel.CanScopeAbstractUnix(),
		DenyPathSockets: kernel.DenyPathSockets(p.NestedSandbox), Empty: emptyPaths(p)}
	if p.ReadOnly {
		// readonly.go: nothing to protect, pin or bind writable; but the Git
		// configs are readable, and --hide-secrets binds their copies over them.
		if !p.GitConfigCopies {
			return pr, nil
		}
		protected, err := gitguard.ProtectedPaths(p.Repo)
		if err != nil {
			<-pr.sockets.done
			return nil, fmt.Errorf("--hide-secrets: find the repository's Git configs: %w", err)
		}
		protected, pr.gitCopies, pr.Notes = gitConfigCopies(p, protected)
		for _, g := range protected {
			if g.Copy != "" {
				pr.Session.Protected = append(pr.Session.Protected, g)
			}
		}
		return pr, nil
	}
	protected, err := gitguard.ProtectedPaths(p.Repo, meta.roots...)
	if err != nil {
		<-pr.sockets.done
		return nil, fmt.Errorf("protect Git paths: %w", err)
	}
	added, err := addDirProtected(p)
	if err != nil {
		<-pr.sockets.done
		return nil, err
	}
	protected = append(protected, added...)
	o.mark(("protected paths"))
	pr.Session.Pinned = gitguard.PinnedDirs(append(append([]string{p.Repo}, meta.roots...), p.AddDirs...), protected)
	// After the pins: a config the copies add lies outside the writable roots.
	protected, pr.gitCopies, pr.Notes = gitConfigCopies(p, protected)
	pr.Session.Protected, pr.Session.GitRW = protected, meta.ops
	return pr, nil
}

// socketScope is what the host sockets' masks depend on in p and the linked
// worktree's writable Git metadata (kernel.HostSockets). The repository, the
// further directories and that metadata are host directories: bound over HOME's
// overlay where they lie below HOME, their sockets are the host's, to be masked.
func socketScope(p *policy.Policy, gitRW []mounts.Op) kernel.SocketScope {
	s := kernel.SocketScope{Home: p.Home, KeptPrivate: p.KeepPrivate, NestedSandbox: p.NestedSandbox}
	s.Bound = append(append(s.Bound, p.Repo), p.AddDirs...)
	if !p.ReadOnly {
		for _, op := range gitRW {
			s.Bound = append(s.Bound, op.Dest)
		}
	}
	for _, k := range p.Keep {
		s.Bound = append(s.Bound, k.Path)
	}
	for _, k := range p.Sockets {
		s.Handed = append(s.Handed, k.Bind)
	}
	for _, h := range p.Hide {
		s.Hidden = append(s.Hidden, h.Path)
	}
	return s
}

// ForDryRun completes the session as --dry-run shows it, writing nothing: the
// --disk-tmp directory and the push guard's staging are named, not made.
func (pr *Prepared) ForDryRun(o Options, p *policy.Policy) error {
	if err := pr.readLimits(); err != nil {
		return err
	}
	if err := pr.takeSockets(); err != nil {
		return err
	}
	if p.DiskTmp {
		pr.Session.DiskTmp = filepath.Join(p.CacheDir, "tmp", "SESSION")
	}
	pr.Session.ExtraRO = pushGuardDryRun(o, p)
	return dryRunLookPath(p)
}

// A launch completes the session in two steps. Placeholders creates what the plan
// binds and is missing (placeholders for protected Git paths, kept paths, hidden
// paths' stand-ins): from then on the audit's baseline may be taken (the session's
// prelaunch). ForLaunch then stages the push guard and the --disk-tmp directory, and
// checks again, right before the plan is built, that what it binds is what was
// decided on (identity.go). The identities seen go into the session as data
// (SourceIDs); the plan puts them on the operations. Close undoes the staging.
func (pr *Prepared) Placeholders(o Options, p *policy.Policy) error {
	if err := gitguard.EnsurePlaceholders(pr.Session.Protected); err != nil {
		return err
	}
	if err := prepareKept(p); err != nil {
		return err
	}
	if err := writeGitConfigCopies(p.CacheDir, pr.gitCopies); err != nil {
		return err
	}
	empty, err := emptySources(p)
	if err != nil {
		return err
	}
	pr.Session.Empty = empty
	o.mark("placeholders")
	return nil
}

// RepoID is the repository's identity as the launch planned for it.
func (pr *Prepared) RepoID() mounts.FileID { return pr.repoID }

// ForLaunch is the second step (see Placeholders).
func (pr *Prepared) ForLaunch(o Options, p *policy.Policy) error {
	if err := pr.readLimits(); err != nil {
		return err
	}
	writable := append([]string{p.Repo}, p.AddDirs...)
	for _, op := range pr.Session.GitRW {
		writable = append(writable, op.Source)
	}
	guard, err := preparePushGuard(o, p, writable)
	if err != nil {
		return err
	}
	pr.undo = append(pr.undo, guard.cleanup)
	pr.Session.ExtraRO = guard.ops
	o.mark(("push guard"))
	if p.DiskTmp {
		dir, release, err := leftovers.MakeDiskTmp(p.CacheDir, o.Stderr)
		if err != nil {
			return err
		}
		pr.undo = append(pr.undo, release)
		pr.Session.DiskTmp = dir
	}
	ids := map[string]mounts.FileID{}
	if err := verifyLaunch(p, pr.repoID, pr.Session.Protected, ids); err != nil {
		return err
	}
	if err := keptIdentities(p, ids); err != nil {
		return err
	}
	// The linked worktree's common dir: its audit holds the directory with this
	// identity (hostaudit.Auditor.UnboundGitDir), the backend binds no other.
	for _, op := range pr.Session.GitRW {
		if op.Kind != mounts.Bind {
			continue
		}
		id, err := Identify(op.Source)
		if err != nil {
			return fmt.Errorf("%s changed while agentbox was starting (%v); not launching", op.Source, err)
		}
		ids[op.Source] = id
	}
	if err := deviceIdentities(p, ids); err != nil {
		return err
	}
	pr.Session.SourceIDs = ids
	return pr.takeSockets()
}

// Plan is the mount plan of p (the policy the session runs, with the sockets its
// services hand in) on the prepared session (mounts/build).
func (pr *Prepared) Plan(p *policy.Policy) mounts.Plan {
	return build.Plan(p, pr.Session)
}

// Close undoes what ForLaunch staged, last first.
func (pr *Prepared) Close() {
	<-pr.sockets.done // a launch that stopped before ForLaunch took it
	for i := len(pr.undo) - 1; i >= 0; i-- {
		pr.undo[i]()
	}
	pr.undo = nil
}

// dryRunLookPath refuses, as the launch would, a command that is not there. The host's
// view stands in for the sandbox's, except for what the sandbox replaces: its /tmp
// and /run start empty.
func dryRunLookPath(p *policy.Policy) error {
	name := p.Command[0]
	if strings.Contains(name, "/") && !filepath.IsAbs(name) {
		name = filepath.Join(p.Workdir, name)
	}
	var dirs []string
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if d == "" || !filepath.IsAbs(d) {
			d = filepath.Join(p.Workdir, d)
		}
		if !hostpath.Within(d, "/tmp") && !hostpath.Within(d, "/run") {
			dirs = append(dirs, d)
		}
	}
	if _, err := nsinit.LookPath(name, strings.Join(dirs, string(filepath.ListSeparator))); err != nil {
		return fmt.Errorf("command %s: %w", p.Command[0], err)
	}
	return nil
}
