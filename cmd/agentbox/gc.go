package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/agentbox/agentbox/internal/termsafe"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/session"
)

const gcUsage = `Usage: agentbox gc [--dry-run]

Removes what sessions whose launcher died without cleaning up (killed with SIGKILL,
out of memory, power loss) left on the host: --disk-tmp directories below
${XDG_CACHE_HOME:-$HOME/.cache}/agentbox/tmp and push-guard staging directories
/tmp/agentbox-guard-*. Only the calling user's directories are considered. A
directory a live session owns is never removed: a live launcher holds a lock on
DIR.lock beside it, which the kernel drops when the launcher dies. The HOME
overlay's upper layer lives in memory inside the sandbox and leaves nothing behind.

One line per directory on stdout. Exit status: 0 done, 1 a directory could not be
removed, 125 bad input.

Flags:
`

func cmdGC(args []string) int {
	fs := flag.NewFlagSet("gc", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dryRun := fs.Bool("dry-run", false, "list what would be removed, remove nothing")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(os.Stdout, gcUsage)
			fs.SetOutput(os.Stdout)
			fs.PrintDefaults()
			return 0
		}
		return fail("gc: %v", err)
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
