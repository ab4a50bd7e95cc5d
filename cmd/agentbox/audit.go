package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentbox/agentbox/gitguard"
	"github.com/agentbox/agentbox/internal/cli"
	"github.com/agentbox/agentbox/internal/termsafe"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/session"
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
input. With --fix each finding's file is moved aside to
NAME.agentbox-quarantine-ID (never deleted).`,
	Flags: func() *flag.FlagSet { fs, _, _ := auditFlags(); return fs },
}

func auditFlags() (fs *flag.FlagSet, repo *string, fix *bool) {
	fs = flag.NewFlagSet("audit", flag.ContinueOnError)
	repo = fs.String("repo", "", "the repository `DIR` (default: Git top level of the current directory, else the current directory)")
	fix = fs.Bool("fix", false, "move each finding's file aside instead of only reporting it")
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
	// First what a killed agentbox left pending here, against its own baseline, as
	// the next agentbox exec would: that session's findings are moved aside.
	if dir, err := stateDir(); err == nil {
		session.AuditPending(dir, repo, os.Stderr)
	}
	surface, err := gitguard.Scan(repo, gitguard.ScanOptions{
		HostConfigs: gitguard.HostConfigFiles(os.Getenv),
		GitDirs:     gitguard.OutsideGitDirs(repo),
		Home:        os.Getenv("HOME"),
	})
	if err != nil {
		return fail("%v", err)
	}
	findings := gitguard.Compare(nil, surface)
	if *fix {
		gitguard.Quarantine(findings, "audit-"+gitguard.NewAuditID())
	}
	for _, f := range findings {
		fmt.Fprintln(os.Stdout, termsafe.String(f.String()))
	}
	if len(findings) == 0 {
		fmt.Fprintf(os.Stderr, "agentbox: audit: %s: nothing found that would make Git run a program\n", termsafe.Quote(repo))
		return 0
	}
	fmt.Fprintf(os.Stderr, "agentbox: audit: %s: %d finding(s)\n", termsafe.Quote(repo), len(findings))
	return 1
}

// auditRepo resolves --repo, or finds the Git top level of the working directory by
// names only (running git there could fire what the audit looks for).
func auditRepo(flagValue string) (string, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	dir := policy.GitTopLevel(cwd)
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
