package main

import (
	"fmt"

	"github.com/agentbox/agentbox/shadow"
)

// printPorts gives show's rows for the --host-port and --publish forwardings: each
// with what it relayed once the session has ended, as the policy listed them
// while it runs (or when the launcher was killed).
func printPorts(row func(k, v string), r shadow.Record) {
	if len(r.Ports) == 0 {
		for _, m := range r.Policy.HostPorts {
			row("host-port", m+" (inside:host)")
		}
		for _, m := range r.Policy.Publish {
			row("publish", m+" (inside:host)")
		}
		return
	}
	for _, f := range r.Ports {
		var line string
		if f.Kind == "publish" {
			line = fmt.Sprintf("host 127.0.0.1:%d -> 127.0.0.1:%d inside", f.Host, f.Inside)
		} else {
			line = fmt.Sprintf("127.0.0.1:%d inside -> host 127.0.0.1:%d", f.Inside, f.Host)
		}
		line += fmt.Sprintf(": %d %s", f.Connections, pick(f.Connections == 1, "connection", "connections"))
		if f.Failed > 0 {
			line += fmt.Sprintf(", %d failed to connect", f.Failed)
		}
		if f.Refused > 0 {
			line += fmt.Sprintf(", %d refused past the limit", f.Refused)
		}
		row(oneLine(f.Kind), line)
	}
}
