package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentbox/agentbox/gitguard"
	"github.com/agentbox/agentbox/gitguard/audit"
	"github.com/agentbox/agentbox/gitguard/gitconfig"
	"github.com/agentbox/agentbox/internal/cli"
	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/termsafe"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/session/hostaudit"
)

var auditCommand = cli.Command{
	Name:    "audit",
	Summary: "report what would make Git run a program",
	Help: `Reports everything inside the repository that would make Git run a program: config
keys such as core.fsmonitor or core.hooksPath, executable hooks, commondir and
gitdir pointers, nested and submodule Git directories, include targets, .gitmodules
update commands, rebase exec lines. It never runs git on the repository. Without a
baseline it cannot tell the user's own settings from planted ones, so it reports
both; the audit after each agentbox exec session reports only what the session
added or changed.

First it runs any audit that a killed agentbox exec left pending for the
repository, against that session's baseline, as the next agentbox exec would: its
findings are moved aside and reported on stderr.

One line per finding on stdout. Exit status: 0 nothing found, 1 findings, 125 bad
input. With --fix a config file is written again without its dangerous entries (the
rest of your configuration, remotes and branches, stays; a copy of the whole file is
kept below the state directory's quarantine/), and any other finding's file is moved
there (never deleted). Settings that look like your own (an editor or a pager set to
a plain command; in the repository's own configs, a program outside it with no
arguments) are listed apart as "yours, kept" and never changed.`,
	Flags: func() *flag.FlagSet { fs, _, _ := auditFlags(); return fs },
}

func auditFlags() (fs *flag.FlagSet, repo *string, fix *bool) {
	fs = flag.NewFlagSet("audit", flag.ContinueOnError)
	repo = fs.String("repo", "", "the repository `DIR` (default: Git top level of the current directory, else the current directory)")
	fix = fs.Bool("fix", false, "remove what was found: dangerous config entries taken out of their file (a copy kept), other files moved to the state directory's quarantine")
	return fs, repo, fix
}

func cmdAudit(args []string) int {
	fs, repoFlag, fix := auditFlags()
	if st, done := parseFlags(fs, auditCommand, args); done {
		return st
	}
	if fs.NArg() > 0 {
		return fail("audit: unexpected argument %q", fs.Arg(0))
	}
	repo, err := auditRepo(*repoFlag)
	if err != nil {
		return fail("audit: %v", err)
	}
	// What exec refuses, audit refuses (P6): from / or HOME the walk would cross
	// /proc and other users' homes, and --fix would move what is not a project's.
	if err := auditAllowed(repo); err != nil {
		return fail("audit: %v", err)
	}
	// First what a killed agentbox left pending here, against its own baseline, as
	// the next agentbox exec would: that session's findings are moved aside.
	if dir, err := stateDir(); err == nil {
		// The pending audit's lines name what the killed session chose: escaped,
		// as exec's are.
		stderr := termsafe.NewWriter(os.Stderr)
		hostaudit.Pending(dir, repo, stderr)
		stderr.Flush()
	}
	surface, err := audit.Scan(repo, audit.ScanOptions{
		HostConfigs: gitconfig.HostConfigFiles(os.Getenv),
		GitDirs:     gitguard.OutsideGitDirs(repo),
		Home:        os.Getenv("HOME"),
		// Never a walk of /proc or /sys mounted in the tree.
		SkipKernelMounts: true,
	})
	if err != nil {
		return fail("%v", err)
	}
	// Without a baseline, an editor or a pager of your own looks like a plant: such
	// settings are reported apart and never removed.
	findings, own := audit.SplitOwnSettings(audit.Compare(nil, surface))
	if *fix {
		fixFindings(findings)
	}
	for _, f := range findings {
		fmt.Fprintln(os.Stdout, termsafe.String(f.String()))
	}
	for _, o := range own {
		fmt.Fprintln(os.Stdout, "yours, kept: "+termsafe.String(o))
	}
	if len(findings) == 0 {
		fmt.Fprintf(os.Stderr, "agentbox: audit: %s: nothing found that would make Git run a program\n", termsafe.Quote(repo))
		return 0
	}
	fmt.Fprintf(os.Stderr, "agentbox: audit: %s: %d finding(s)\n", termsafe.Quote(repo), len(findings))
	return 1
}

// fixFindings acts on what the audit found: a config file is written again without
// its dangerous entries (the rest of the user's configuration stays; a copy of the
// whole file is kept), anything else is moved out of the repository into agentbox's
// state directory (in place, NAME.agentbox-quarantine-ID, when there is none).
func fixFindings(findings []audit.Finding) {
	id := "audit-" + audit.NewAuditID()
	state, err := stateDir()
	if err != nil {
		audit.Quarantine(findings, id)
		return
	}
	root := filepath.Join(state, "quarantine")
	var others []int
	for i := range findings {
		if findings[i].Kind == audit.KindConfig {
			audit.FixConfig(&findings[i], id, root)
			continue
		}
		others = append(others, i)
	}
	rest := make([]audit.Finding, len(others))
	for j, i := range others {
		rest[j] = findings[i]
	}
	audit.QuarantineTo(rest, id, root)
	for j, i := range others {
		findings[i] = rest[j]
	}
}

// auditRepo resolves --repo, or finds the Git top level of the working directory by
// names only (running git there could fire what the audit looks for).
func auditRepo(flagValue string) (string, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	dir := hostpath.GitTopLevel(cwd)
	if flagValue != "" {
		dir = flagValue
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(cwd, dir)
		}
	}
	canon, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("repo %s: %w", dir, err)
	}
	fi, err := os.Stat(canon)
	if err != nil {
		return "", fmt.Errorf("repo %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("repo %s: not a directory", dir)
	}
	return canon, nil
}

// auditAllowed applies exec's repository rules (policy.CheckRepo, P6) to the audited
// directory, and policy.CheckRepoState: the walk never enters agentbox's own state.
func auditAllowed(repo string) error {
	home := os.Getenv("HOME")
	if c, err := filepath.EvalSymlinks(home); err == nil && filepath.IsAbs(home) && c != "/" {
		home = c
	} else {
		home = ""
	}
	if err := policy.CheckRepo(repo, home); err != nil {
		return err
	}
	state, err := stateDir()
	if err != nil {
		return nil
	}
	if err := policy.CheckOwnDir("state directory", state, os.Geteuid()); err != nil {
		return err
	}
	return policy.CheckRepoState(repo, state)
}
