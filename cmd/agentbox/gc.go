package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/gitguard/snapshot"
	"github.com/agentbox/agentbox/internal/cli"
	"github.com/agentbox/agentbox/internal/termsafe"
	"github.com/agentbox/agentbox/internal/widen"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/session/leftovers"
	"github.com/agentbox/agentbox/shadow"
)

var gcCommand = cli.Command{
	Name:    "gc",
	Summary: "remove what killed sessions left behind",
	Help: `Prunes the shadow store (agentbox log) and the snapshot store: the records and
snapshots of repositories that no longer exist once they hold no session or
snapshot within AGE (a session can move a directory it can write away), the
sessions older than AGE (default 90d; 0 keeps them, and gone repositories' too),
and snapshot blobs no snapshot names (left by a killed save). Then removes what sessions whose launcher died without cleaning up (killed with SIGKILL,
out of memory, power loss) left on the host: --disk-tmp directories below
${XDG_CACHE_HOME:-$HOME/.cache}/agentbox/tmp, push-guard staging directories
/tmp/agentbox-guard-*, checkpoint endpoints /tmp/agentbox-checkpoint-* and
--ssh-agent filter directories /tmp/agentbox-ssh-*. Only
the calling user's directories are considered. A
directory a live session owns is never removed: a live launcher holds a lock on
DIR.lock beside it, which the kernel drops when the launcher dies. The HOME
overlay's upper layer lives in memory inside the sandbox and leaves nothing behind.

One line per directory on stdout. Exit status: 0 done, 1 a directory could not be
removed, 125 bad input.`,
	Flags: func() *flag.FlagSet { fs, _, _ := gcFlags(); return fs },
}

func gcFlags() (fs *flag.FlagSet, dryRun *bool, age *string) {
	fs = flag.NewFlagSet("gc", flag.ContinueOnError)
	dryRun = fs.Bool("dry-run", false, "list what would be removed, remove nothing")
	age = fs.String("sessions-older-than", "90d", "remove recorded sessions older than `AGE` (as log --since: 3d, 2w, 12h; 0 keeps all)")
	return fs, dryRun, age
}

func cmdGC(args []string) int {
	fs, dryRun, age := gcFlags()
	if st, done := parseFlags(fs, gcCommand, args); done {
		return st
	}
	if fs.NArg() > 0 {
		return fail("gc: unexpected argument %q", fs.Arg(0))
	}
	olderThan, err := parseAge(*age)
	if err != nil {
		return fail("gc: --sessions-older-than %q: %v (e.g. 30d, 3w or 12h, 0 keeps all)", *age, err)
	}
	status, said := 0, 0
	if state, err := stateDir(); err == nil {
		status, said = gcStores(state, olderThan, *age, *dryRun)
		if !*dryRun {
			// The modes a killed launcher's audit widened (internal/widen).
			for _, p := range widen.Recover(filepath.Join(state, "widen")) {
				fmt.Printf("restored the mode of %s (a killed audit had widened it)\n", termsafe.Quote(p))
				said++
			}
		}
	}
	found, err := leftovers.GC(leftovers.GCOptions{
		CacheDir: policy.CacheDirFor(os.Getenv("XDG_CACHE_HOME"), os.Getenv("HOME")),
		GuardDir: "/tmp",
		DryRun:   *dryRun,
	})
	for _, l := range found {
		if l.Live && (l.Kind == leftovers.CheckpointKind || l.Kind == leftovers.SSHAgentKind) {
			continue // a running session's endpoint: not a leftover
		}
		said++
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
	if said == 0 {
		fmt.Println("nothing to remove")
	}
	return status
}

// parseAge reads Nd (days), Nw (weeks) or a Go duration, as log --since does; "0"
// is no limit.
func parseAge(s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	for unit, days := range map[string]int{"d": 1, "w": 7} {
		if n, ok := strings.CutSuffix(s, unit); ok {
			d, err := strconv.Atoi(n)
			if err != nil || d <= 0 || d*days > 100000 {
				return 0, errors.New("not a number of days or weeks")
			}
			return time.Duration(d*days) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, errors.New("not a positive duration")
	}
	return d, nil
}

// gcStores prunes the shadow store and the default snapshot store below state,
// one line each on stdout; it returns 1 when something could not be removed, and
// how many lines it printed.
func gcStores(state string, olderThan time.Duration, age string, dryRun bool) (int, int) {
	status, said := 0, 0
	line := func(path, repo, what string, removed bool, err error) {
		said++
		kind := "record of " + quoteLine(repo) + ": " + what
		switch {
		case err != nil:
			fmt.Printf("failed %s (%s): %v\n", path, kind, err)
			status = 1
		case removed:
			fmt.Printf("removed %s (%s)\n", path, kind)
		default:
			fmt.Printf("stale %s (%s): would be removed\n", path, kind)
		}
	}
	pruned, err := shadow.Prune(shadow.PruneOptions{StateDir: state, OlderThan: olderThan, DryRun: dryRun})
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentbox: gc: shadow store: %v\n", err)
		status = 1
	}
	// A repository gone from its path keeps its records while it has sessions
	// within the age (shadow.Prune), and its snapshots with them.
	goneKept := map[string]bool{}
	for _, p := range pruned {
		if p.GoneKept {
			goneKept[p.Repo] = true
			if p.Sessions == 0 && p.Err == nil {
				continue
			}
		}
		if p.Sessions > 0 && p.Err == nil {
			// Old sessions leave the store in place: say what went, not the store.
			said++
			fmt.Printf("%s %d old %s of %s (older than %s)\n", pick(p.Removed, "pruned", "would prune"), p.Sessions,
				pick(p.Sessions == 1, "session", "sessions"), quoteLine(p.Repo), age)
			continue
		}
		line(p.Path, p.Repo, p.What, p.Removed, p.Err)
	}
	keepGone := func(repo string, newest time.Time) bool {
		return olderThan <= 0 || goneKept[repo] || !newest.Before(time.Now().Add(-olderThan))
	}
	snaps, err := snapshot.PruneStore(filepath.Join(state, "snapshots"), keepGone, dryRun)
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentbox: gc: snapshot store: %v\n", err)
		status = 1
	}
	for _, p := range snaps {
		line(p.Path, p.Repo, "snapshots, "+p.What, p.Removed, p.Err)
	}
	return status, said
}

// quoteLine makes a recorded path safe for the terminal.
func quoteLine(s string) string {
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}
