package main

import (
	"flag"
	"os"

	"github.com/agentbox/agentbox/internal/cli"

	"github.com/agentbox/agentbox/nsinit"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/session"
)

var execCommand = cli.Command{
	Name:    "exec",
	Args:    "[--] [COMMAND [ARG...]]",
	Summary: "run COMMAND (default $SHELL) sandboxed",
	Help: `Runs COMMAND (default $SHELL, else /bin/bash) in the sandbox. Exit status: the
command's; 128+N when it was killed by signal N; 125 when agentbox failed before
the command started.`,
	Flags: func() *flag.FlagSet { return new(execArgs).flags() },
}

// execArgs holds what exec's flags set.
type execArgs struct {
	opts           policy.Options
	cfg            session.Config
	dryRun, asJSON bool
}

func (a *execArgs) flags() *flag.FlagSet {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	fs.BoolVar(&a.dryRun, "dry-run", false, "do every check, print the mount plan and exit without launching")
	fs.BoolVar(&a.asJSON, "json", false, "with --dry-run: print the plan as JSON")
	fs.StringVar(&a.opts.Repo, "repo", "", "the one writable `DIR` (default: Git top level of the current directory, else the current directory)")
	fs.BoolVar(&a.opts.Offline, "offline", false, "new network namespace: loopback only")
	fs.BoolVar(&a.opts.DiskTmp, "disk-tmp", false, "sandbox /tmp is a fresh directory below the cache dir, removed on exit")
	fs.StringVar(&a.opts.Backend, "backend", "native", "the backend `NAME`: native, bwrap or auto")
	session.RegisterFlags(fs, &a.cfg)
	return fs
}

func cmdExec(args []string) int {
	var a execArgs
	fs := a.flags()
	if st, done := parseFlags(fs, execCommand, args); done {
		return st
	}
	if os.Getenv("AGENTBOX") == "1" {
		// Inside a session HOME is already an overlay, which overlayfs cannot
		// stack on in a user namespace; and this launcher would take the outer
		// session's pending audit for a dead one.
		return fail("exec: already inside an agentbox sandbox (AGENTBOX=1 is set): sandboxes do not nest; run the command directly")
	}
	opts, cfg, dryRun, asJSON := &a.opts, &a.cfg, &a.dryRun, &a.asJSON
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
	if dir, rest, ok := repoFirst(opts.Command); ok {
		// agent-box's habit, "agentbox exec DIR -- CMD": DIR is the repository.
		if opts.Repo != "" {
			return fail("exec: both --repo %s and %s before --: pass the repository once", opts.Repo, dir)
		}
		opts.Repo, opts.Command = dir, rest
	}

	pol, err := policy.New(*opts)
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
	status, err := session.Run(*cfg)
	if err != nil {
		return fail("%v", err)
	}
	return status
}

// repoFirst recognises "DIR -- CMD...": a first argument that is a directory, followed
// by "--". A command is never a directory, so this cannot shadow a real command line.
func repoFirst(args []string) (dir string, rest []string, ok bool) {
	if len(args) < 2 || args[1] != "--" {
		return "", nil, false
	}
	if fi, err := os.Stat(args[0]); err != nil || !fi.IsDir() {
		return "", nil, false
	}
	return args[0], args[2:], true
}
