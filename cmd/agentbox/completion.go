package main

import (
	"flag"
	"os"
	"runtime/debug"
	"time"

	"github.com/agentbox/agentbox/internal/cli"
)

var completionCommand = cli.Command{
	Name:    "completion",
	Args:    "bash|zsh|fish",
	Summary: "print a shell completion script",
	Help: `Prints a completion script for the shell named, generated from the same flag
definitions as --help. For bash: agentbox completion bash > ~/.local/share/bash-completion/completions/agentbox
For zsh: agentbox completion zsh > "${fpath[1]}/_agentbox". For fish:
agentbox completion fish > ~/.config/fish/completions/agentbox.fish`,
	Flags: func() *flag.FlagSet { return flag.NewFlagSet("completion", flag.ContinueOnError) },
}

func cmdCompletion(args []string) int {
	fs := completionCommand.Flags()
	if st, done := parseFlags(fs, completionCommand, args); done {
		return st
	}
	if fs.NArg() != 1 {
		return fail("completion: name one shell: agentbox completion bash|zsh|fish")
	}
	switch fs.Arg(0) {
	case "bash":
		cli.Bash(os.Stdout, "agentbox", specs())
	case "zsh":
		cli.Zsh(os.Stdout, "agentbox", specs())
	case "fish":
		cli.Fish(os.Stdout, "agentbox", specs())
	default:
		return fail("completion: unknown shell %q: agentbox completion bash|zsh|fish", fs.Arg(0))
	}
	return 0
}

var manCommand = cli.Command{
	Name:    "man",
	Summary: "print the manual page (roff)",
	Help: `Prints agentbox(1) in roff, generated from the same flag definitions as --help.
Read it with: agentbox man | man -l -`,
	Flags: func() *flag.FlagSet { return flag.NewFlagSet("man", flag.ContinueOnError) },
}

func cmdMan(args []string) int {
	fs := manCommand.Flags()
	if st, done := parseFlags(fs, manCommand, args); done {
		return st
	}
	if fs.NArg() > 0 {
		return fail("man: unexpected argument %q", fs.Arg(0))
	}
	// The date is the build's, not today's, so that the page is reproducible.
	cli.Man(os.Stdout, "agentbox", Version,
		"run a coding agent or any command in a sandbox it builds itself", specs(), buildDate())
	return 0
}

// buildDate is the commit time of the build when the Go toolchain recorded it.
func buildDate() time.Time {
	if t, ok := vcsTime(); ok {
		return t
	}
	return time.Unix(0, 0).UTC()
}

// vcsTime is the commit time the Go toolchain stamped into the binary, if any.
func vcsTime() (time.Time, bool) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return time.Time{}, false
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.time" {
			t, err := time.Parse(time.RFC3339, s.Value)
			return t, err == nil
		}
	}
	return time.Time{}, false
}
