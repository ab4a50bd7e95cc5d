package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/gitguard/audit"
	"github.com/agentbox/agentbox/gitguard/snapshot"
	"github.com/agentbox/agentbox/internal/cli"
	"github.com/agentbox/agentbox/internal/termsafe"
)

var restoreCommand = cli.Command{
	Name:    "restore",
	Args:    "[SESSION|SNAPSHOT]",
	Summary: "restore (or --check) a Git metadata snapshot",
	Help: `Restores a Git metadata snapshot into DIR, which must not exist or be empty.
SESSION is a session id (agentbox log): the snapshot taken before it started; without
an argument, the last session of the repository.
SNAPSHOT is a record of the snapshot store (…/snapshots/NAME-HASH/snaps/STAMP.snap,
as 'agentbox show SESSION' names it; DIR defaults to NAME-STAMP in the current
directory) or a ZIP of older agentbox versions (DIR defaults to the ZIP's path
without ".zip"). Every piece of a stored snapshot is checked against its SHA-256;
a missing or changed piece is an error naming it, and nothing is restored. An
entry that cannot be restored safely is skipped and listed. --check only checks. The common
Git dir becomes DIR/.git; a linked worktree's own gitdir and its .git pointer file go
to DIR/git-worktree and DIR/dotgit; DIR/manifest.json says where they came from.
Nothing is written over an existing directory or a live .git. What the restored copy
holds that would make Git run a program (core.fsmonitor, a hook …: another session may
have planted it before the snapshot was taken) is taken out and listed, as agentbox
audit --fix does; your own editor or pager stays.`,
	Flags: func() *flag.FlagSet { fs, _, _ := restoreFlags(); return fs },
}

func restoreFlags() (fs *flag.FlagSet, into *string, check *bool) {
	fs = flag.NewFlagSet("restore", flag.ContinueOnError)
	into = fs.String("into", "", "restore into `DIR` (must not exist, or be empty)")
	check = fs.Bool("check", false, "check every piece of the snapshot, restore nothing")
	return fs, into, check
}

func cmdRestore(args []string) int {
	fs, into, check := restoreFlags()
	// Flags may come before or after the ZIP.
	var pos []string
	for {
		if st, done := parseFlags(fs, restoreCommand, args); done {
			return st
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pos) > 1 {
		return fail("restore: want one session or snapshot (agentbox restore [SESSION|SNAPSHOT] [--into DIR])")
	}
	snap, err := sessionSnapshot(strings.Join(pos, ""))
	if err != nil {
		return fail("restore: %v", err)
	}
	dir := *into
	var res *snapshot.Restored
	switch {
	case snapshot.IsStoredSnapshot(snap) && *check:
		if res, err = snapshot.CheckStored(snap); err != nil {
			return fail("restore: %v", err)
		}
		fmt.Printf("snapshot %s of %s: %d entries, every piece intact\n", oneLine(snap), oneLine(res.Manifest.Repo), res.Entries)
		printSkipped(res.Skipped)
		return 0
	case *check:
		return fail("restore: --check reads stored snapshots (*.snap); %s is not one", snap)
	case snapshot.IsStoredSnapshot(snap):
		if dir == "" {
			rec := strings.TrimSuffix(filepath.Base(snap), snapshot.RecordSuffix)
			dir = filepath.Base(filepath.Dir(filepath.Dir(snap))) + "-" + rec
		}
		res, err = snapshot.RestoreStored(snap, dir)
	default:
		if dir == "" {
			dir = strings.TrimSuffix(snap, ".zip")
			if dir == snap {
				dir += ".restored"
			}
		}
		res, err = snapshot.Restore(snap, dir)
	}
	if err != nil {
		return fail("restore: %v", err)
	}
	m := res.Manifest
	head := m.Head
	if m.HeadCommit != "" && m.HeadCommit != m.Head {
		head += " (" + m.HeadCommit + ")"
	}
	fmt.Printf("restored the Git metadata of %s, saved %s, into %s\n", oneLine(m.Repo), m.Time.Format("2006-01-02 15:04:05 MST"), oneLine(res.Dir))
	fmt.Printf("  HEAD was %s\n", oneLine(head)) // the ref name the sandbox chose
	fmt.Printf("  %s/.git is the Git dir %s\n", oneLine(res.Dir), oneLine(m.GitCommonDir))
	if m.Linked() {
		fmt.Printf("  %s/git-worktree is the worktree's gitdir %s\n", oneLine(res.Dir), oneLine(m.GitDir))
	}
	if m.DotGitFile != "" {
		fmt.Printf("  %s/dotgit is the pointer file %s\n", oneLine(res.Dir), oneLine(m.DotGitFile))
	}
	printSkipped(res.Skipped)
	defuseRestored(res.Dir)
	// A branch the session moved or deleted is taken back from its old sha.
	fmt.Printf("  a lost branch: git --git-dir %s/.git for-each-ref names each branch's old sha; git -C %s branch -f NAME SHA puts it back (git -C %s reflog lists recent ones)\n",
		oneLine(res.Dir), oneLine(m.Repo), oneLine(m.Repo))
	return 0
}

// printSkipped lists the entries a restore left out, each line made safe for the
// terminal (the names come from the sandbox's reach).
func printSkipped(skipped []string) {
	if len(skipped) == 0 {
		return
	}
	fmt.Printf("  skipped %d entries:\n", len(skipped))
	for _, s := range skipped {
		fmt.Printf("    %s\n", oneLine(s))
	}
}

// defuseRestored takes out of a restored snapshot what would make Git run a
// program, as agentbox audit --fix does, and lists it. A snapshot is taken before a
// session starts, so it holds whatever another session running then had planted in
// the shared Git metadata, and the hint below runs Git there. The user's own editor
// or pager stays ("yours, kept"); the stored snapshot keeps everything.
func defuseRestored(dir string) {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	opt := audit.ScanOptions{SkipKernelMounts: true}
	if wt := filepath.Join(dir, "git-worktree"); isDir(wt) {
		opt.GitDirs = []string{wt}
	}
	surface, err := audit.Scan(dir, opt)
	if err != nil {
		fmt.Printf("  NOT audited (%s): run agentbox audit --repo %s before any git there\n", oneLine(err.Error()), oneLine(dir))
		return
	}
	findings, own := audit.SplitOwnSettings(audit.Compare(nil, surface))
	fixFindings(findings)
	for _, f := range findings {
		fmt.Printf("  taken out, would make Git run a program: %s\n", termsafe.String(f.String()))
	}
	for _, o := range own {
		fmt.Printf("  yours, kept: %s\n", termsafe.String(o))
	}
}

func isDir(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.IsDir()
}
