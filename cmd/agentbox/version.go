package main

import (
	"fmt"
	"os"
	"runtime"

	"github.com/agentbox/agentbox/internal/cli"
)

// Version is agentbox's version, set at build time with -ldflags -X main.Version=….
var Version = "0.1.0-dev"

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
	fmt.Printf("agentbox %s (%s, %s/%s)\n", Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return 0
}
