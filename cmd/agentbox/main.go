// No periodic GOMAXPROCS update from the cgroup's CPU limit: the launcher is
// short-lived or idle, and the update costs every launch a goroutine start and a read
// of the cgroup files from sysmon. The runtime's own comment names sandboxes as its
// users.
//go:debug updatemaxprocs=0

// Nor an initial GOMAXPROCS from the cgroup's CPU limit: a launcher that mostly waits
// on the kernel gains nothing from fewer Ps, and the CPUs it may run on still bound
// it. (The runtime still reads /proc/self/cgroup, /proc/self/mountinfo and the
// limit's files once at start, to count what the setting changed; no setting spares
// that.)
//go:debug containermaxprocs=0

// Command agentbox runs a coding agent, or any command, inside a sandbox that it
// builds itself. See README.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/agentbox/agentbox/compat"
	"github.com/agentbox/agentbox/internal/cli"
	"github.com/agentbox/agentbox/internal/stack"
	"github.com/agentbox/agentbox/internal/termsafe"
	"github.com/agentbox/agentbox/nsinit"
	"github.com/agentbox/agentbox/sshagent"
)

// exitUsage is the status of every failure of agentbox itself, before the command
// started: bad flags, refused paths, a setup step that failed.
const exitUsage = 125

// command is one subcommand: what help, completions and the manual say of it, and its
// entry point, which returns the exit status.
type command struct {
	cli.Command
	run func(args []string) int
}

// commands lists the subcommands in the order help shows them. Each one's flags are
// defined once, by the function in its Flags field, which its entry point calls too.
func commands() []command {
	return []command{
		{execCommand, cmdExec},
		{auditCommand, cmdAudit},
		{undoCommand, cmdUndo},
		{checkpointCommand, cmdCheckpoint},
		{restoreCommand, cmdRestore},
		{logCommand, cmdLog},
		{showCommand, cmdShow},
		{diffCommand, cmdDiff},
		{doctorCommand, cmdDoctor},
		{benchCommand, cmdBench},
		{gcCommand, cmdGC},
		{completionCommand, cmdCompletion},
		{manCommand, cmdMan},
		{versionCommand, cmdVersion},
	}
}

// specs returns the commands' descriptions, for completions and the manual.
func specs() []cli.Command {
	var out []cli.Command
	for _, c := range commands() {
		out = append(out, c.Command)
	}
	return out
}

func main() {
	// The role is decided first, before anything else runs: the re-executed init
	// must not pay for the CLI.
	if nsinit.IsInit() {
		nsinit.Main()
		return
	}
	if compat.IsStage() {
		compat.StageMain()
		return
	}
	// A launch ends up needing 32 KiB of stack: grown now, while shallow, it is
	// copied once instead of at 8, 16 and 32 KiB through a deep call chain.
	stack.To32K()
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 {
		usage(os.Stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "--help", "help":
		usage(os.Stdout)
		return 0
	case "--version", "-V":
		return cmdVersion(nil)
	case sshagent.ProxyCommandName:
		return cmdSSHProxy(args[1:])
	}
	for _, c := range commands() {
		if c.Name == args[0] {
			return c.run(args[1:])
		}
	}
	if strings.HasPrefix(args[0], "-") {
		return fail("unknown flag: %s before the command (agentbox COMMAND [FLAGS]; see agentbox --help)", args[0])
	}
	if fi, err := os.Stat(args[0]); err == nil && fi.IsDir() {
		// agent-box's habit: agentbox DIR -- CMD.
		return fail("unknown command %q: to run in that directory, type: agentbox exec --repo %s -- COMMAND", args[0], args[0])
	}
	var names []string
	for _, c := range commands() {
		names = append(names, c.Name)
	}
	if s := cli.Suggest(args[0], names); s != "" {
		return fail("unknown command %q: did you mean %s? (see agentbox --help)", args[0], s)
	}
	return fail("unknown command %q (see agentbox --help)", args[0])
}

func usage(w io.Writer) {
	fmt.Fprint(w, `agentbox runs a command inside a sandbox: host read-only, one repository
writable, HOME a disposable overlay, private /tmp and /run.

Usage:
  agentbox COMMAND [FLAGS] [ARGS]

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-12s%s\n", c.Name, c.Summary)
	}
	fmt.Fprint(w, `
Run 'agentbox COMMAND --help' for the flags of a command.
`)
}

// parseFlags parses a command's flags; done is true when the command should return
// status at once (help printed, or bad flags reported).
func parseFlags(fs *flag.FlagSet, c cli.Command, args []string) (status int, done bool) {
	err := cli.Parse(fs, c, args, os.Stdout)
	if errors.Is(err, cli.ErrHelp) {
		return 0, true
	}
	if err != nil {
		return fail("%s: %v (see agentbox %s --help)", c.Name, err, c.Name), true
	}
	return 0, false
}

// fail prints one line naming what failed and why, and returns exitUsage.
func fail(format string, args ...any) int {
	// Errors name repository paths and carry what Git or the sandbox said: one
	// line, with no byte the terminal could take as a command.
	fmt.Fprintf(os.Stderr, "agentbox: %s\n", termsafe.Sprintf(format, args...))
	return exitUsage
}
