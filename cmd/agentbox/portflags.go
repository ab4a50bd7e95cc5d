package main

import (
	"flag"

	"github.com/agentbox/agentbox/internal/cli"
	"github.com/agentbox/agentbox/policy"
)

// registerPortFlags adds --host-port and --publish (policy/ports.go).
func registerPortFlags(fs *flag.FlagSet, opts *policy.Options) {
	fs.Var(cli.NewList(&opts.HostPort), "host-port", "with --offline or --allow-net: 127.0.0.1:PORT inside reaches the host's 127.0.0.1:HOSTPORT (default PORT), relayed by agentbox, TCP only; nothing else of the host's loopback (`PORT[:HOSTPORT]`, repeatable)")
	fs.Var(cli.NewList(&opts.Publish), "publish", "with --offline or --allow-net: the host's 127.0.0.1:HOSTPORT (default PORT) reaches a server the command runs on 127.0.0.1:PORT inside, for the session's life, relayed by agentbox (`PORT[:HOSTPORT]`, repeatable)")
}
