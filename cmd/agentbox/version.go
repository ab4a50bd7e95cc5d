package main

import (
	"fmt"
	"runtime"

	"github.com/agentbox/agentbox/session"
)

func cmdVersion([]string) int {
	fmt.Printf("agentbox %s (%s, %s/%s)\n", session.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return 0
}
