package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/agentbox/agentbox/gitguard"
	"github.com/agentbox/agentbox/internal/cli"
)

var restoreCommand = cli.Command{
	Name:    "restore",
	Args:    "ZIP",
	Summary: "unpack a Git metadata snapshot",
	Help: `Unpacks a Git metadata snapshot (NAME.git-save-YYYYMMDD-HHMMSS.zip) into DIR, which
must not exist or be empty; the default is the ZIP's path without ".zip". The common
Git dir becomes DIR/.git; a linked worktree's own gitdir and its .git pointer file go
to DIR/git-worktree and DIR/dotgit; DIR/manifest.json says where they came from.
Nothing is written over an existing directory or a live .git.`,
	Flags: func() *flag.FlagSet { fs, _ := restoreFlags(); return fs },
}

func restoreFlags() (fs *flag.FlagSet, into *string) {
	fs = flag.NewFlagSet("restore", flag.ContinueOnError)
	into = fs.String("into", "", "restore into `DIR` (must not exist, or be empty)")
	return fs, into
}

func cmdRestore(args []string) int {
	fs, into := restoreFlags()
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
	if len(pos) != 1 {
		return fail("restore: want exactly one snapshot ZIP (agentbox restore ZIP [--into DIR])")
	}
	zip, dir := pos[0], *into
	if dir == "" {
		dir = strings.TrimSuffix(zip, ".zip")
		if dir == zip {
			dir += ".restored"
		}
	}
	res, err := gitguard.Restore(zip, dir)
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
	return 0
}
