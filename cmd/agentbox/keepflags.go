package main

import (
	"flag"
	"strings"

	"github.com/agentbox/agentbox/agentcfg"
	"github.com/agentbox/agentbox/internal/cli"
	"github.com/agentbox/agentbox/policy"
)

// registerKeepFlags adds --keep and --keep-agent (policy/keep.go, agentcfg) and
// --hide and --hide-secrets (policy/hide.go).
func registerKeepFlags(fs *flag.FlagSet, opts *policy.Options) {
	fs.Var(cli.NewList(&opts.Keep), "keep", "keep `PATH` below HOME: bound writable through the HOME overlay, so writes reach the host (repeatable)")
	fs.Var(cli.NewList(&opts.KeepAgent), "keep-agent", "keep what `AGENT` ("+strings.Join(agentcfg.Names(), ", ")+") needs below HOME; its exec surface is read-only or audited (repeatable)")
	fs.Var(cli.NewList(&opts.Hide), "hide", "make `PATH` (a directory or file) empty and read-only inside (repeatable)")
	fs.Var(cli.NewList(&opts.AddDir), "add-dir", "a further writable `DIR`, with the repository's refusals and Git protections; never a Git directory or inside one (repeatable)")
	fs.Var(cli.NewList(&opts.AllowSocket), "allow-socket", "hand the host Unix socket `PATH` in at its own path, e.g. \"$SSH_AUTH_SOCK\" (repeatable; SSH_AUTH_SOCK is unset inside otherwise)")
	fs.BoolVar(&opts.ReadOnly, "read-only", false, "the repository read-only too (a review session): no Git snapshot or audit")
	fs.BoolVar(&opts.HideSecrets, "hide-secrets", false, "hide the well-known credential stores below HOME (SSH private keys, ~/.gnupg, ~/.aws, browser profiles …) but for a kept agent's own")
}
