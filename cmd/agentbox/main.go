// No periodic GOMAXPROCS update from the cgroup's CPU limit: the launcher is
// short-lived or idle, and the update costs every launch a goroutine start and a
// read of the cgroup files from sysmon (-4% of 'agentbox exec -- true', interleaved
// A/B, 300 rounds). The runtime's own comment names sandboxes as its users.
//go:debug updatemaxprocs=0

// Command agentbox runs a coding agent, or any command, inside a sandbox that it
// builds itself. See README.md.
package main

import (
	"fmt"
	"os"

	"github.com/agentbox/agentbox/internal/termsafe"
	"github.com/agentbox/agentbox/nsinit"
)

// exitUsage is the status of every failure of agentbox itself, before the command
// started: bad flags, refused paths, a setup step that failed.
const exitUsage = 125

// commands maps each subcommand to its entry point; each returns the exit status.
var commands = map[string]func(args []string) int{
	"doctor":  cmdDoctor,
	"exec":    cmdExec,
	"gc":      cmdGC,
	"audit":   cmdAudit,
	"bench":   cmdBench,
	"log":     cmdLog,
	"show":    cmdShow,
	"diff":    cmdDiff,
	"restore": cmdRestore,
	"version": cmdVersion,
}

func main() {
	// The role is decided first, before anything else runs: the re-executed init
	// must not pay for the CLI.
	if nsinit.IsInit() {
		nsinit.Main()
		return
	}
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
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "agentbox: unknown command %q (see agentbox --help)\n", args[0])
		return exitUsage
	}
	return cmd(args[1:])
}

func usage(w *os.File) {
	fmt.Fprint(w, `agentbox runs a command inside a sandbox: host read-only, one repository
writable, HOME a disposable overlay, private /tmp and /run.

Usage:
  agentbox exec [flags] [--] [COMMAND [ARG...]]   run COMMAND (default $SHELL) sandboxed
  agentbox audit [--repo DIR] [--fix]             report what would make Git run a program
  agentbox restore ZIP [--into DIR]                unpack a Git metadata snapshot
  agentbox log [--repo DIR | --all] [--results]    list recorded sessions (or results)
  agentbox show ID                                 print a session's record
  agentbox diff [--stat] ID                        what a session changed in the repository
  agentbox doctor [--json]                         check this machine can run the sandbox, with fixes
  agentbox bench [--runs N] [--json] [--svg FILE]  measure launches: native vs bwrap vs floors
  agentbox gc [--dry-run]                          remove what killed sessions left behind
  agentbox version                                 print the version

Run 'agentbox COMMAND --help' for the flags of a command.
`)
}

// fail prints one line naming what failed and why, and returns exitUsage.
func fail(format string, args ...any) int {
	// Errors name repository paths and carry what Git or the sandbox said: one
	// line, with no byte the terminal could take as a command.
	fmt.Fprintf(os.Stderr, "agentbox: %s\n", termsafe.Sprintf(format, args...))
	return exitUsage
}
