package main

import (
	"fmt"
	"os"
	"runtime"

	"github.com/agentbox/agentbox/internal/cli"
	"github.com/agentbox/agentbox/session"
)

var versionCommand = cli.Command{
	Name:    "version",
	Summary: "print the version",
}

func cmdVersion(args []string) int {
	if len(args) > 0 {
		if args[0] == "-h" || args[0] == "--help" {
			cli.PrintHelp(os.Stdout, nil, versionCommand)
			return 0
		}
		return fail("version: unexpected argument %q", args[0])
	}
	fmt.Printf("agentbox %s (%s, %s/%s)\n", session.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return 0
}
