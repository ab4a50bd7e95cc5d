package main

import (
	"fmt"
	"io"
	"slices"

	"github.com/agentbox/agentbox/policy"
)

// How a launch keeps the command off the host's path sockets (P4): Landlock's
// resolve-unix rule (Linux 7.1+, the default there), or masks over the sockets found
// at launch (before 7.1, or with --nested-sandbox).
const (
	socketsLandlock = "landlock"
	socketsMasks    = "masks"
)

// pathSockets is the mechanism a launch gets where the kernel can deny path sockets
// (canDeny: kernel.CanDenyPathSockets) and --nested-sandbox is nested; it is
// kernel.DenyPathSockets's decision, named.
func pathSockets(canDeny, nested bool) string {
	if canDeny && !nested {
		return socketsLandlock
	}
	return socketsMasks
}

// socketsMeaning says what each mechanism gives and gives up, for doctor.
var socketsMeaning = map[string]string{
	socketsLandlock: "denied by Landlock, whenever bound; the command cannot mount, so agents' own sandboxes (bubblewrap, unshare -m) fail inside",
	socketsMasks:    "masked where found at launch; those bound later, or in a network namespace agentbox cannot see, stay reachable; the command can mount",
}

// nestedSandboxNote is the line exec prints before launching a kept agent
// (--keep-agent: Claude Code and Codex both build sandboxes of their own) on a
// kernel whose Landlock rule would refuse that sandbox's mounts, when the user has
// not chosen either way: the agent's sandbox fails, and the message it prints does
// not name agentbox. Set nested-sandbox (true or false) and the line goes.
func nestedSandboxNote(pol *policy.Policy, prov map[string]string, canDeny bool) string {
	if _, chosen := prov["nested-sandbox"]; chosen || pol.NestedSandbox || !canDeny || len(pol.KeepAgents) == 0 {
		return ""
	}
	agents := slices.Clone(pol.KeepAgents)
	slices.Sort(agents)
	return fmt.Sprintf("on Linux 7.1+ Landlock keeps the command from mounting, so the own sandbox of %v fails inside; "+
		"--nested-sandbox lets it mount, masking host sockets found at launch instead (docs/agents.md); nested-sandbox = false in your config silences this", agents)
}

// doctorSockets is what doctor says of the host's path sockets: the mechanism a
// launch gets with the user's config, and with and without --nested-sandbox.
type doctorSockets struct {
	Launch        string `json:"launch"`           // with the user's config file's defaults
	Default       string `json:"default"`          // without --nested-sandbox
	NestedSandbox string `json:"nested_sandbox"`   // with it
	Config        string `json:"config,omitempty"` // where the user's config sets nested-sandbox
}

// probeSockets fills doctorSockets; the user's config file, when it cannot be read,
// is left out (exec names its error).
func probeSockets(canDeny bool) doctorSockets {
	d := doctorSockets{Default: pathSockets(canDeny, false), NestedSandbox: pathSockets(canDeny, true)}
	d.Launch = d.Default
	var cl execArgs
	if a, _, prov, err := layered(nil, cl.flags(), ""); err == nil {
		d.Launch, d.Config = pathSockets(canDeny, a.opts.NestedSandbox), prov["nested-sandbox"]
	}
	return d
}

func printSockets(w io.Writer, d doctorSockets) {
	fmt.Fprintf(w, "\nhost path sockets (P4): a launch gets %s: %s\n", d.Launch, socketsMeaning[d.Launch])
	if d.Config != "" {
		fmt.Fprintf(w, "            nested-sandbox is set in %s\n", d.Config)
	}
	if d.Default == d.NestedSandbox {
		fmt.Fprintf(w, "            --nested-sandbox changes nothing on this kernel (Linux 7.1+ only)\n")
		return
	}
	fmt.Fprintf(w, "            without nested-sandbox: %s\n", d.Default)
	fmt.Fprintf(w, "            with --nested-sandbox:  %s: %s\n", d.NestedSandbox, socketsMeaning[d.NestedSandbox])
}
