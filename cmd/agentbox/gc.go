package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/agentbox/agentbox/internal/cli"
	"github.com/agentbox/agentbox/internal/termsafe"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/session"
)

var gcCommand = cli.Command{
	Name:    "gc",
	Summary: "remove what killed sessions left behind",
	Help: `Removes what sessions whose launcher died without cleaning up (killed with SIGKILL,
out of memory, power loss) left on the host: --disk-tmp directories below
${XDG_CACHE_HOME:-$HOME/.cache}/agentbox/tmp and push-guard staging directories
/tmp/agentbox-guard-*. Only the calling user's directories are considered. A
directory a live session owns is never removed: a live launcher holds a lock on
DIR.lock beside it, which the kernel drops when the launcher dies. The HOME
overlay's upper layer lives in memory inside the sandbox and leaves nothing behind.

One line per directory on stdout. Exit status: 0 done, 1 a directory could not be
removed, 125 bad input.`,
	Flags: func() *flag.FlagSet { fs, _ := gcFlags(); return fs },
}

func gcFlags() (fs *flag.FlagSet, dryRun *bool) {
	fs = flag.NewFlagSet("gc", flag.ContinueOnError)
	dryRun = fs.Bool("dry-run", false, "list what would be removed, remove nothing")
	return fs, dryRun
}

func cmdGC(args []string) int {
	fs, dryRun := gcFlags()
	if st, done := parseFlags(fs, gcCommand, args); done {
		return st
	}
	if fs.NArg() > 0 {
		return fail("gc: unexpected argument %q", fs.Arg(0))
	}
	found, err := session.GC(session.GCOptions{
		CacheDir: policy.CacheDirFor(os.Getenv("XDG_CACHE_HOME"), os.Getenv("HOME")),
		GuardDir: "/tmp",
		DryRun:   *dryRun,
	})
	status := 0
	for _, l := range found {
		switch {
		case l.Live:
			fmt.Printf("kept %s (%s): a live session owns it\n", termsafe.Quote(l.Path), l.Kind)
		case l.Err != nil:
			fmt.Printf("failed %s (%s): %s\n", termsafe.Quote(l.Path), l.Kind, termsafe.String(l.Err.Error()))
			status = 1
		case l.Removed:
			fmt.Printf("removed %s (%s)\n", termsafe.Quote(l.Path), l.Kind)
		default:
			fmt.Printf("stale %s (%s): would be removed\n", termsafe.Quote(l.Path), l.Kind)
		}
	}
	if err != nil {
		return fail("%v", err)
	}
	return status
}
