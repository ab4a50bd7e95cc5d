package main

import (
	"os"

	"github.com/agentbox/agentbox/sshagent"
)

// cmdSSHProxy is ssh's ProxyCommand inside a session with --allow-net
// (sshagent.GitSSHCommand): plumbing, not in the help.
func cmdSSHProxy(args []string) int {
	if len(args) != 3 {
		return fail("%s PROXY HOST PORT: want three arguments", sshagent.ProxyCommandName)
	}
	if err := sshagent.ProxyCommand(args[0], args[1], args[2], os.Stdin, os.Stdout); err != nil {
		return fail("ssh proxy: %v", err)
	}
	return 0
}
