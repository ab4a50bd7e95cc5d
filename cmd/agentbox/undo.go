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

	"github.com/agentbox/agentbox/internal/cli"
	"github.com/agentbox/agentbox/session"
	"github.com/agentbox/agentbox/shadow"
)

var undoCommand = cli.Command{
	Name:    "undo",
	Args:    "[SESSION] [-- PATH...]",
	Summary: "put the working tree back as a recorded session found it",
	Help: `Puts back every file SESSION (default: the repository's last session) added,
changed or removed, as it was when SESSION started: content, executable bit and
symlinks, from the session's record. With PATHs, only those (and what is below them).
Before it changes anything, undo records the tree as it is as an entry of its own,
which 'agentbox log' lists and 'agentbox undo ID' reverses.
A file changed since SESSION ended stops the undo (they are listed; --force
overwrites them). Files the record does not hold (ignored files, files past its
bounds, nested repositories) are listed and left as they are. Undo refuses while a
session runs on the repository. Exit status: 0 done, 1 stopped or done in part,
125 refused.`,
	Flags: func() *flag.FlagSet { fs, _ := undoFlags(); return fs },
}

type undoArgs struct {
	repo          string
	force, dryRun bool
}

func undoFlags() (*flag.FlagSet, *undoArgs) {
	a := &undoArgs{}
	fs := flag.NewFlagSet("undo", flag.ContinueOnError)
	fs.StringVar(&a.repo, "repo", "", "undo the last session of the repository `DIR` (default: as exec picks it)")
	fs.BoolVar(&a.force, "force", false, "overwrite files changed since the session ended")
	fs.BoolVar(&a.dryRun, "dry-run", false, "list what undo would do, change nothing")
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
	store, rec, err := undoTarget(state, pos, a.repo)
	if err != nil {
		return fail("undo: %v", err)
	}
	rel, err := repoPaths(store.Repo, paths)
	if err != nil {
		return fail("undo: %v", err)
	}
	release, err := session.HoldRepo(state, store.Repo)
	if err != nil {
		return fail("undo: %v", err)
	}
	defer release()
	plan, err := store.PlanUndo(rec, rel)
	if err != nil {
		return fail("undo: %v", err)
	}
	return runUndo(os.Stdout, store, plan, a, append([]string{"agentbox", "undo", rec.ID, "--"}, rel...))
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

// runUndo reports plan and, unless it stops or only lists, carries it out.
func runUndo(w io.Writer, store *shadow.Store, plan *shadow.UndoPlan, a *undoArgs, argv []string) int {
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
	if len(plan.Changes) == 0 {
		fmt.Fprintf(w, "session %s: nothing to put back\n", id)
		return 0
	}
	if a.dryRun {
		for _, c := range plan.Changes {
			fmt.Fprintf(w, "would %s %s\n", pick(c.From.Mode == "", "remove", "put back"), oneLine(c.Path))
		}
		return 0
	}
	host, _ := os.Hostname()
	rec := shadow.Record{
		Command: argv, Args: os.Args[1:], Start: time.Now(),
		Policy:      shadow.Policy{Repo: store.Repo, Backend: shadow.UndoBackend},
		LauncherPID: os.Getpid(), UID: os.Getuid(), Host: host,
	}
	res, err := store.ApplyUndo(plan, rec)
	if res == nil {
		return fail("undo: %v", err)
	}
	for _, f := range res.Failed {
		fmt.Fprintf(w, "not put back: %s: %s\n", oneLine(f.Path), oneLine(f.Reason))
	}
	fmt.Fprintf(w, "put back %d of %d paths as session %s found them; recorded as %s (agentbox undo %s reverses it)\n",
		res.Done, len(plan.Changes), id, res.ID, res.ID)
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentbox: undo: %s\n", oneLine(err.Error()))
		return 1
	}
	if len(res.Failed) > 0 {
		return 1
	}
	return 0
}
