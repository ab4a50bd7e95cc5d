package prepare

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/agentbox/agentbox/gitguard/pushguard"
	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/termsafe"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/session/leftovers"
)

// pushGuard is the staged P9 policy executables and the read-only binds that put them
// in the sandbox.
type pushGuard struct {
	ops    []mounts.Op
	staged *pushguard.StagedGuard
	lock   *leftovers.Lock // this launcher's claim on the staging dir, for agentbox gc
	warn   io.Writer       // the session's warnings (Options.Stderr)
}

// preparePushGuard puts the guard in the user's cache (pushguard.CacheGuard), or, where
// the sandbox could write there (writable: the sources of its writable binds) or the
// cache cannot hold it, stages it below the host's /tmp, which cleanup removes. With
// --allow-git-push, or without any git on PATH, there is nothing to do.
func preparePushGuard(o Options, p *policy.Policy, writable []string) (*pushGuard, error) {
	if o.AllowGitPush {
		return &pushGuard{}, nil
	}
	h, found, err := pushguard.FindHostGit(os.Getenv)
	if err != nil || !found {
		return &pushGuard{}, err
	}
	if p.CacheDir != "" {
		outside := func(dir string) bool {
			for _, w := range writable {
				if hostpath.Within(dir, w) || hostpath.Within(w, dir) {
					return false
				}
			}
			return true
		}
		if path, err := pushguard.CacheGuard(h, filepath.Join(p.CacheDir, "pushguard"), outside); err == nil {
			return &pushGuard{ops: pushGuardOps(h, path)}, nil
		}
	}
	staged, err := pushguard.StageGuard(h)
	if err != nil {
		return nil, err
	}
	g := &pushGuard{ops: pushGuardOps(h, staged.Guard), staged: staged, warn: o.Stderr}
	if g.lock, err = leftovers.Claim(staged.Dir); err != nil {
		g.cleanup()
		return nil, fmt.Errorf("push guard: %w", err)
	}
	return g, nil
}

// pushGuardDryRun is the guard's binds as --dry-run shows them, writing nothing: the
// cached guard's path, or (without a cache dir) the staging directory's name with
// XXXXXX for its random part.
func pushGuardDryRun(o Options, p *policy.Policy) []mounts.Op {
	if o.AllowGitPush {
		return nil
	}
	h, found, err := pushguard.FindHostGit(os.Getenv)
	if err != nil || !found {
		return nil
	}
	if p.CacheDir != "" {
		return pushGuardOps(h, filepath.Join(p.CacheDir, "pushguard", pushguard.GuardCacheName(h)))
	}
	dir := filepath.Join("/tmp", fmt.Sprintf("%s%d-XXXXXX", pushguard.GuardStagePrefix, os.Getpid()))
	return pushGuardOps(h, filepath.Join(dir, "git"))
}

// pushGuardOps puts the real Git at its private path first — a tmpfs as the mount
// point, then the real Git's directory read-only on it (sources are taken from the
// host view, before the guard covers anything) — then the guard over every file that
// runs Git under a name that can push.
func pushGuardOps(h pushguard.HostGit, guard string) []mounts.Op {
	ops := []mounts.Op{
		{Kind: mounts.Tmpfs, Dest: pushguard.GuardRunDir, Mode: 0o755, Why: "P9 mount point for the real git"},
		{Kind: mounts.BindRO, Source: filepath.Dir(h.Git), Dest: pushguard.GuardRunDir, Why: "P9 the real git, for the push guard only"},
	}
	for _, dest := range h.Shadow {
		ops = append(ops, mounts.Op{Kind: mounts.BindRO, Source: guard, Dest: dest, Why: "P9 push guard over git"})
	}
	return ops
}

// cleanup removes the staging directory, then its claim. It runs when the launcher
// returns, whatever the command's outcome; a failure is reported, not fatal.
func (g *pushGuard) cleanup() {
	if g == nil {
		return
	}
	if err := g.staged.Remove(); err != nil {
		fmt.Fprintf(g.warn, "agentbox: %s\n", termsafe.String(err.Error()))
	}
	g.lock.Release()
}
