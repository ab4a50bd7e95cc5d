package main

import (
	"flag"
	"strconv"

	"github.com/agentbox/agentbox/internal/cli"
	"github.com/agentbox/agentbox/policy"
)

// registerSSHAgentFlags adds --ssh-agent and --ssh-key (policy/sshagent.go).
func registerSSHAgentFlags(fs *flag.FlagSet, opts *policy.Options) {
	fs.Var(sshAgentValue{opts}, "ssh-agent", "serve an SSH agent inside (SSH_AUTH_SOCK) that forwards to yours but lists and signs with only the --ssh-key keys (every key when none is named), refuses adding, removing and locking keys, and with --allow-net signs only for sessions to allowed hosts known in known_hosts")
	fs.Var(cli.NewList(&opts.SSHKey), "ssh-key", "let the SSH `KEY` through --ssh-agent: a comment, a fingerprint SHA256:…, or a public key file (repeatable; implies --ssh-agent)")
}

// sshAgentValue is --ssh-agent: true asks for the agent, false (a repository's
// file may write it) turns it off even when keys are named.
type sshAgentValue struct{ o *policy.Options }

func (v sshAgentValue) String() string {
	if v.o == nil {
		return "false"
	}
	return strconv.FormatBool(v.o.SSHAgent && !v.o.NoSSHAgent)
}

func (v sshAgentValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	v.o.SSHAgent, v.o.NoSSHAgent = b, !b
	return nil
}

func (sshAgentValue) IsBoolFlag() bool { return true }
