package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/agentbox/agentbox/nsinit"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/session"
)

const execUsage = `Usage: agentbox exec [flags] [--] [COMMAND [ARG...]]

Runs COMMAND (default $SHELL, else /bin/bash) in the sandbox. Exit status: the
command's; 128+N when it was killed by signal N; 125 when agentbox failed before
the command started.

Flags:
`

func cmdExec(args []string) int {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		opts   policy.Options
		cfg    session.Config
		dryRun = fs.Bool("dry-run", false, "do every check, print the mount plan and exit without launching")
		asJSON = fs.Bool("json", false, "with --dry-run: print the plan as JSON")
	)
	fs.StringVar(&opts.Repo, "repo", "", "the one writable `DIR` (default: Git top level of the current directory, else the current directory)")
	fs.BoolVar(&opts.Offline, "offline", false, "new network namespace: loopback only")
	fs.BoolVar(&opts.DiskTmp, "disk-tmp", false, "sandbox /tmp is a fresh directory below the cache dir, removed on exit")
	fs.StringVar(&opts.Backend, "backend", "native", "`native`, bwrap or auto")
	registerKeepFlags(fs, &opts)
	session.RegisterFlags(fs, &cfg)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(os.Stdout, execUsage)
			fs.SetOutput(os.Stdout)
			fs.PrintDefaults()
			return 0
		}
		return fail("exec: %v", err)
	}
	if *asJSON && !*dryRun {
		return fail("exec: --json goes with --dry-run")
	}
	if !*dryRun && opts.Backend == policy.BackendNative {
		// The signals the launch forwards are registered before the policy is read
		// and the plan prepared (where os/signal registers them, that takes a
		// while). Not stopped: after the launch they act as if uncaught, and the
		// process exits.
		cfg.Signals = nsinit.CatchSignals()
	}
	cwd, err := os.Getwd()
	if err != nil {
		return fail("exec: working directory: %v", err)
	}
	opts.Cwd = cwd
	opts.Home = os.Getenv("HOME")
	opts.Shell = os.Getenv("SHELL")
	opts.XDGCacheHome = os.Getenv("XDG_CACHE_HOME")
	opts.XDGStateHome = os.Getenv("XDG_STATE_HOME")
	opts.Command = fs.Args()

	pol, err := policy.New(opts)
	if err != nil {
		return fail("%v", err)
	}
	cfg.Policy = pol
	cfg.Args = args
	cfg.Stdout, cfg.Stderr = os.Stdout, os.Stderr
	if *dryRun {
		cfg.DryRun = session.DryRunText
		if *asJSON {
			cfg.DryRun = session.DryRunJSON
		}
	}
	status, err := session.Run(cfg)
	if err != nil {
		return fail("%v", err)
	}
	return status
}
