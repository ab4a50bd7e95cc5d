package prepare

import (
	"errors"
	"fmt"
	"os"

	"github.com/agentbox/agentbox/internal/grantledger"
	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/termsafe"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/policy"
)

// CheckWritableBinds is the last check of the Git directory rule (policy/grant.go)
// before the backend: every writable bind of the plan must take its source from one
// of the policy's grants (policy.Policy.Grants) or from gitDirs (a linked worktree's
// common dir), so a grant added later cannot skip the rule. Each grant is checked
// again now, through policy's no-follow walk, and the bind of its path gets the
// identity that walk saw, which the backend checks on what it opens: the directory
// bound is the one checked.
func CheckWritableBinds(p *policy.Policy, plan *mounts.Plan, gitDirs []string) error {
	grants := p.Grants()
	for _, d := range gitDirs {
		grants = append(grants, policy.Grant{What: "linked worktree metadata", Path: d, Kind: policy.GrantGitDir})
	}
	now := map[string]policy.Grant{}
	for i, op := range plan.Ops {
		if op.Kind != mounts.Bind {
			continue
		}
		if next := i + 1; next < len(plan.Ops) && plan.Ops[next].Kind == mounts.BindRO && plan.Ops[next].Dest == op.Dest {
			continue // a mount point for a read-only bind, covered at once
		}
		var g policy.Grant
		for _, c := range grants {
			if c.Covers(op.Source) && len(c.Path) > len(g.Path) {
				g = c
			}
		}
		if g.Path == "" {
			return fmt.Errorf("%s would be writable inside but is no grant agentbox checked; not launching", op.Source)
		}
		cur, ok := now[g.Path]
		if !ok {
			var err error
			if cur, err = policy.CheckGrant(g.What, g.Path, g.Path, g.Kind); err != nil {
				return err
			}
			now[g.Path] = cur
		}
		if op.Source != g.Path {
			continue
		}
		id := mounts.FileID{Dev: cur.ID.Dev, Ino: cur.ID.Ino}
		if op.SourceID != (mounts.FileID{}) && op.SourceID != id {
			return fmt.Errorf("%s %s changed while agentbox was starting (another directory is at its path); not launching", g.What, g.Path)
		}
		plan.Ops[i].SourceID = id
	}
	return nil
}

// RecordGrants adds the session's writable grants (policy.Policy.Grants and gitDirs,
// a linked worktree's common dir: the sources CheckWritableBinds lets the plan's
// writable binds take, so every directory the plan makes writable lies in one) to
// the ledger of directories sessions were given writable (internal/grantledger),
// first thing in a launch, so that agentbox's host side never runs a program this
// session could have put in one of them, in this session or any later one
// (hostpath.LookPath, the Go API's InitBinary). agentbox's own directories below
// the state and cache directories (--disk-tmp's, removed at the end) are left
// out: nothing is looked up there, and each session's has a new name. A launch
// that cannot record them does not start.
func RecordGrants(p *policy.Policy, gitDirs []string) error {
	dirs := gitDirs[:len(gitDirs):len(gitDirs)]
	for _, g := range p.Grants() {
		own := false
		for _, a := range []string{p.StateDir, p.CacheDir} {
			own = own || a != "" && hostpath.Within(g.Path, a)
		}
		if !own {
			dirs = append(dirs, g.Path)
		}
	}
	if p.StateDir == "" && len(dirs) > 0 {
		return errors.New("no state directory to list the directories this session may write in, and agentbox starts no session it has not listed; set HOME or XDG_STATE_HOME to an absolute path")
	}
	if err := grantledger.Record(p.StateDir, dirs); err != nil {
		return fmt.Errorf("cannot list the directories this session may write in %s (%v), and agentbox starts no session it has not listed; set XDG_STATE_HOME to a directory of yours", termsafe.Quote(grantledger.Path(p.StateDir)), err)
	}
	return recordForReaders(p.StateDir, dirs)
}

// recordForReaders lists dirs in the ledger this process's environment names too,
// when that is not the policy's: the readers (hostpath.LookPath, the Go API's
// InitBinary, the CLI run later) take the state directory from XDG_STATE_HOME and
// HOME, while a policy may be made with another (the Go API passes its
// environment's since wt/red25g, whatever Options.Home says). Policy keeps the
// session out of its own state directory only; this one is kept out here, after it
// exists, so that its canonical form is the one compared.
func recordForReaders(policyState string, dirs []string) error {
	state := grantledger.StateDirFromEnv()
	if state == "" || state == policyState || len(dirs) == 0 {
		return nil
	}
	ledger := termsafe.Quote(grantledger.Path(state))
	refuse := func(why string) error {
		return fmt.Errorf("cannot list the directories this session may write in %s, where agentbox's host-side lookups read them (%s), and agentbox starts no session it has not listed; set XDG_STATE_HOME or HOME to the state directory the session uses", ledger, why)
	}
	if err := policy.CheckOwnDir("state directory", state, os.Geteuid()); err != nil {
		return refuse(err.Error())
	}
	if err := os.MkdirAll(state, 0o700); err != nil {
		return refuse(err.Error())
	}
	for _, d := range dirs {
		if root, ok := hostpath.InsideWritable(state, d); ok {
			return refuse("it lies in " + termsafe.Quote(root) + ", which the session may write")
		}
		if _, ok := hostpath.InsideWritable(d, state); ok {
			return refuse(termsafe.Quote(d) + ", which the session may write, lies in it")
		}
	}
	if err := grantledger.Record(state, dirs); err != nil {
		return refuse(err.Error())
	}
	return nil
}
