package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentbox/agentbox/gitguard/audit"
	"github.com/agentbox/agentbox/gitguard/gitconfig"
	"github.com/agentbox/agentbox/gitguard/snapshot"
	"github.com/agentbox/agentbox/internal/cli"
	"github.com/agentbox/agentbox/internal/treewalk"
	"github.com/agentbox/agentbox/session/hostaudit"
	"github.com/agentbox/agentbox/shadow"
)

var undoCommand = cli.Command{
	Name:    "undo",
	Args:    "[SESSION | --to SESSION@N] [-- PATH...]",
	Summary: "put the working tree back as a recorded session found it",
	Help: `Puts back every file SESSION (default: the repository's last session) added,
changed or removed, as it was when SESSION started: content, executable bit and
symlinks, from the session's record. With PATHs, only those (and what is below them).
Before it changes anything, undo records the tree as it is as an entry of its own,
which 'agentbox log' lists and 'agentbox undo ID' reverses.
A file changed since SESSION ended stops the undo (they are listed; --force
overwrites them). Files the record does not hold (ignored files, files past its
bounds, nested repositories) are listed and left as they are. --git also puts back
HEAD, the refs and the index as the session's Git snapshot holds them (commits,
resets and rebases made inside are undone; no object is deleted); the metadata as
it was is saved first, so an undo of the undo puts it back. Undo refuses while a
session runs on the repository. --to SESSION@N puts the tree back as it was at
step N of the session (a checkpoint, 'agentbox checkpoint'; 0: its start). The tree
is audited after the undo as after a session: a program it put back that the
operator's Git would run (one a hook names) is moved to the quarantine and named.
Exit status: 0 done, 1 stopped, done in part or something moved aside, 125 refused.`,
	Flags: func() *flag.FlagSet { fs, _ := undoFlags(); return fs },
}

type undoArgs struct {
	repo, to           string
	force, dryRun, git bool
}

func undoFlags() (*flag.FlagSet, *undoArgs) {
	a := &undoArgs{}
	fs := flag.NewFlagSet("undo", flag.ContinueOnError)
	fs.StringVar(&a.repo, "repo", "", "undo the last session of the repository `DIR` (default: as exec picks it)")
	fs.BoolVar(&a.force, "force", false, "overwrite files changed since the session ended")
	fs.BoolVar(&a.dryRun, "dry-run", false, "list what undo would do, change nothing")
	fs.StringVar(&a.to, "to", "", "put the tree back as it was at step N of the session (`SESSION@N`: N a checkpoint, 0 its start)")
	fs.BoolVar(&a.git, "git", false, "also put back HEAD, the refs and the index from the session's Git snapshot (objects are kept)")
	return fs, a
}

func cmdUndo(args []string) int {
	var paths []string
	for i, a := range args {
		if a == "--" {
			args, paths = args[:i], args[i+1:]
			break
		}
	}
	fset, a := undoFlags()
	var pos []string
	for {
		if st, done := parseFlags(fset, undoCommand, args); done {
			return st
		}
		if fset.NArg() == 0 {
			break
		}
		pos = append(pos, fset.Arg(0))
		args = fset.Args()[1:]
	}
	if len(pos) > 1 {
		return fail("undo: want at most one session id, then -- and paths (agentbox undo [SESSION] [-- PATH...])")
	}
	state, err := stateDir()
	if err != nil {
		return fail("undo: %v", err)
	}
	if len(pos) == 1 && strings.Contains(pos[0], "@") && a.to == "" {
		a.to, pos = pos[0], nil
	}
	step := 0
	if a.to != "" {
		if len(pos) > 0 || a.repo != "" {
			return fail("undo: --to SESSION@N names the session: give no other session id or --repo")
		}
		id, n, err := shadow.ParseStep(a.to)
		if err != nil || n < 0 {
			return fail("undo: --to %s: want SESSION@N (N a step; agentbox log lists them)", a.to)
		}
		pos, step = []string{id}, n
	}
	store, rec, err := undoTarget(state, pos, a.repo)
	if err != nil {
		return fail("undo: %v", err)
	}
	if step > 0 {
		if a.git {
			return fail("undo: --git puts back the Git metadata as the session's start found it; give it no step above 0")
		}
		if rec, _, err = store.AtStep(rec, step); err != nil {
			return fail("undo: %v", err)
		}
	}
	rel, err := repoPaths(store.Repo, paths)
	if err != nil {
		return fail("undo: %v", err)
	}
	release, err := hostaudit.HoldRepo(state, store.Repo)
	if err != nil {
		return fail("undo: %v", err)
	}
	defer release()
	plan, err := store.PlanUndo(rec, rel)
	if err != nil {
		return fail("undo: %v", err)
	}
	u := &undo{w: os.Stdout, store: store, plan: plan, a: a, state: state}
	if a.git {
		if len(rel) > 0 {
			return fail("undo: --git puts back the whole Git metadata; give it no PATHs")
		}
		if rec.Snapshot == "" {
			return fail("undo: session %s has no Git snapshot (it ran with --no-git-save?)", rec.ID)
		}
		if u.gitState, err = snapshot.ReadGitState(rec.Snapshot); err != nil {
			return fail("undo: --git: snapshot %s: %v", rec.Snapshot, err)
		}
		if u.gitChanges, err = snapshot.PutBack(store.Repo, u.gitState, true); err != nil {
			return fail("undo: --git: %v", err)
		}
	}
	argv := []string{"agentbox", "undo", rec.ID}
	if a.git {
		argv = []string{"agentbox", "undo", "--git", rec.ID}
	}
	if step > 0 {
		argv = []string{"agentbox", "undo", "--to", fmt.Sprintf("%s@%d", rec.ID, step)}
		u.step = step
	}
	if len(rel) > 0 {
		argv = append(append(argv, "--"), rel...)
	}
	return u.run(argv)
}

// undo is one undo under way.
type undo struct {
	w          io.Writer
	store      *shadow.Store
	plan       *shadow.UndoPlan
	a          *undoArgs
	state      string
	gitState   *snapshot.GitState // --git: what to put back
	gitChanges []string           // --git: what differs now
	base       *audit.Surface     // the tree before the undo, for the audit after it
	launch     *audit.Launch      // the first walk's watch, for the second
	walked     bool               // the record's first walk was handed out
	findings   []audit.Finding    // what the audit after the undo moved aside
	auditErr   error              // why the audit after the undo could not run
	step       int                // the step put back (--to), 0: the session's start
}

// undoTarget finds the session to undo: the one named, else the newest of the
// repository's.
func undoTarget(state string, pos []string, repoFlag string) (*shadow.Store, shadow.Record, error) {
	if len(pos) == 1 {
		if repoFlag != "" {
			return nil, shadow.Record{}, errors.New("--repo and a session id: give one (a session id names its repository)")
		}
		return shadow.Find(state, pos[0])
	}
	repo, err := repoFor(repoFlag)
	if err != nil {
		return nil, shadow.Record{}, err
	}
	s, err := shadow.OpenExisting(state, repo)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, shadow.Record{}, fmt.Errorf("no sessions recorded for %s", repo)
	}
	if err != nil {
		return nil, shadow.Record{}, err
	}
	recs, err := s.Sessions()
	if err != nil {
		return nil, shadow.Record{}, err
	}
	if len(recs) == 0 {
		return nil, shadow.Record{}, fmt.Errorf("no sessions recorded for %s", repo)
	}
	return s, recs[0], nil
}

// repoPaths turns the PATHs given (relative to the working directory) into paths
// relative to repo, refusing any outside it or in its .git.
func repoPaths(repo string, paths []string) ([]string, error) {
	cwd, err := os.Getwd()
	if err == nil {
		cwd, err = filepath.EvalSymlinks(cwd)
	}
	if err != nil {
		return nil, fmt.Errorf("working directory: %w", err)
	}
	var out []string
	for _, p := range paths {
		abs := p
		if !filepath.IsAbs(abs) {
			abs = filepath.Join(cwd, p)
		}
		rel, err := filepath.Rel(repo, filepath.Clean(abs))
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			return nil, fmt.Errorf("%s is outside the repository %s", p, repo)
		}
		for c := range strings.SplitSeq(rel, "/") {
			if strings.EqualFold(c, ".git") {
				return nil, fmt.Errorf("%s is in the repository's Git metadata, which undo does not write", p)
			}
		}
		out = append(out, rel)
	}
	return out, nil
}

// run reports the plan and, unless it stops or only lists, carries it out.
func (u *undo) run(argv []string) int {
	w, store, plan, a := u.w, u.store, u.plan, u.a
	id := plan.Session.ID
	for _, r := range plan.Refused {
		fmt.Fprintf(w, "left as it is: %s: %s\n", oneLine(r.Path), oneLine(r.Reason))
	}
	if plan.NotNamed > 0 {
		fmt.Fprintf(w, "left as they are: %d more files the record of %s does not hold (agentbox show %s)\n", plan.NotNamed, id, id)
	}
	if len(plan.Changed) > 0 {
		for _, r := range plan.Changed {
			fmt.Fprintf(w, "changed since the session ended: %s: %s\n", oneLine(r.Path), oneLine(r.Reason))
		}
		if !a.force {
			fmt.Fprintf(os.Stderr, "agentbox: undo: %d files changed since session %s ended; nothing was changed (--force overwrites them)\n", len(plan.Changed), id)
			return 1
		}
	}
	if len(plan.Changes) == 0 && len(u.gitChanges) == 0 && len(plan.DirsMade) == 0 && len(plan.DirsGone) == 0 {
		fmt.Fprintf(w, "session %s: nothing to put back\n", id)
		return 0
	}
	if a.dryRun {
		for _, c := range plan.Changes {
			what := pick(c.From.Mode == "", "remove", "put back")
			if c.ModeOnly {
				what = fmt.Sprintf("set back to mode %04o", c.Perm)
			}
			fmt.Fprintf(w, "would %s %s\n", what, oneLine(c.Path))
		}
		for _, d := range plan.DirsMade {
			fmt.Fprintf(w, "would remove the directory %s/ if it is left empty\n", oneLine(d.Path))
		}
		for _, d := range plan.DirsGone {
			fmt.Fprintf(w, "would make the directory %s/\n", oneLine(d.Path))
		}
		for _, c := range u.gitChanges {
			fmt.Fprintf(w, "would put back .git/%s\n", oneLine(c))
		}
		return 0
	}
	host, _ := os.Hostname()
	rec := shadow.Record{
		Command: argv, Args: os.Args[1:], Start: time.Now(),
		Policy:      shadow.Policy{Repo: store.Repo, Backend: shadow.UndoBackend},
		LauncherPID: os.Getpid(), UID: os.Getuid(), Host: host,
	}
	if u.gitState != nil {
		// The metadata as it is now, for an undo of this undo.
		path, err := u.saveGit()
		if err != nil {
			return fail("undo: --git: saving the Git metadata as it is first: %v; nothing was changed", err)
		}
		rec.Snapshot = path
	}
	if err := u.scanBefore(); err != nil {
		return fail("undo: the working tree cannot be audited first, so nothing was changed: %v", err)
	}
	res, err := store.ApplyUndo(plan, rec, u.walk)
	if u.launch != nil {
		u.launch.Close() // ApplyUndo failed before its second walk
	}
	if res == nil {
		return fail("undo: %v", err)
	}
	clean := u.audited()
	if u.gitState != nil {
		changed, gerr := snapshot.PutBack(store.Repo, u.gitState, false)
		fmt.Fprintf(w, "put back %d entries of the Git metadata as session %s found them\n", len(changed), id)
		if gerr != nil {
			fmt.Fprintf(os.Stderr, "agentbox: undo: --git: %s\n", oneLine(gerr.Error()))
			return 1
		}
	}
	for _, f := range res.Failed {
		fmt.Fprintf(w, "not put back: %s: %s\n", oneLine(f.Path), oneLine(f.Reason))
	}
	fmt.Fprintf(w, "put back %d of %d files as %s; recorded as %s (agentbox undo %s reverses it)\n",
		res.Done, len(plan.Changes), pick(u.step > 0, fmt.Sprintf("step %d of session %s left them", u.step, id), "session "+id+" found them"), res.ID, res.ID)
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentbox: undo: %s\n", oneLine(err.Error()))
		return 1
	}
	if len(res.Failed) > 0 || !clean {
		return 1
	}
	return 0
}

// saveGit saves the repository's Git metadata to the snapshot store, as a launch
// does, and returns the record's path.
func (u *undo) saveGit() (string, error) {
	dir := filepath.Join(u.state, "snapshots")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	snap, err := snapshot.SaveStored(snapshot.SnapshotOptions{Repo: u.store.Repo, Dir: dir, Version: Version})
	if err != nil {
		return "", err
	}
	if snap == nil {
		return "", errors.New("no snapshot was taken")
	}
	return snap.Path, nil
}

// auditOptions are the audit's options for the repository, as a launch's: the
// host's Git configs name the programs Git runs, some of them in the working tree.
func auditOptions() audit.ScanOptions {
	return audit.ScanOptions{Walk: true, Home: os.Getenv("HOME"), HostConfigs: gitconfig.HostConfigFiles(os.Getenv)}
}

// scanBefore takes the audit's view of the tree before undo changes it, the
// baseline of the audit after it, and places a watch on each directory (where the
// kernel can), so that the second walk reads again only what the undo changed.
func (u *undo) scanBefore() error {
	opt := auditOptions()
	opt.Watch = true
	surf, err := audit.Scan(u.store.Repo, opt)
	if err != nil {
		return err
	}
	u.base, u.launch, surf.Launch = surf, surf.Launch, nil
	return nil
}

// walk is the working tree's walk for the undo's record (nil: the record sweeps the
// tree): first the baseline's, then a new one after the undo, which is also audited
// against the baseline as a session's end is. What undo puts back comes from a
// record, and a record's start can hold what a concurrent session planted and its
// audit then moved out (a program a hook runs): found again, it is moved out again,
// before the record of the undo's end is made.
func (u *undo) walk() *treewalk.Walk {
	if !u.walked {
		u.walked = true
		if w := u.base.Walk; w != nil && w.Complete {
			return w
		}
		return nil
	}
	opt := auditOptions()
	u.launch.Stop()
	opt.Since = u.launch
	cur, err := audit.Scan(u.store.Repo, opt)
	u.launch.Close()
	u.launch = nil
	if err != nil {
		u.auditErr = err
		return nil
	}
	if cur.Launch != nil {
		cur.Launch.Close()
	}
	u.findings = audit.Compare(u.base, cur)
	if len(u.findings) > 0 {
		root := hostaudit.QuarantineRoot(os.Stderr, u.state, []string{u.store.Repo})
		if root == "" {
			audit.Quarantine(u.findings, audit.NewAuditID())
		} else {
			audit.QuarantineTo(u.findings, audit.NewAuditID(), root)
		}
		return nil // what the quarantine moved, the walk does not stand for
	}
	if cur.Walk == nil || !cur.Walk.Complete {
		return nil
	}
	return cur.Walk
}

// audited reports the audit after the undo on stderr: false when it found something
// or could not run.
func (u *undo) audited() bool {
	if u.auditErr != nil {
		fmt.Fprintf(os.Stderr, "agentbox: undo: audit: %s: not audited: %s\n", oneLine(u.store.Repo), oneLine(u.auditErr.Error()))
		return false
	}
	for _, f := range u.findings {
		fmt.Fprintf(os.Stderr, "agentbox: undo: audit: %s\n", oneLine(f.String()))
	}
	return len(u.findings) == 0
}
