package main

import (
	"flag"
	"strings"

	"github.com/agentbox/agentbox/agentcfg"
	"github.com/agentbox/agentbox/policy"
)

// listFlag is a repeatable string flag.
type listFlag struct{ list *[]string }

func (f listFlag) String() string {
	if f.list == nil {
		return ""
	}
	return strings.Join(*f.list, ",")
}

func (f listFlag) Set(v string) error { *f.list = append(*f.list, v); return nil }

// registerKeepFlags adds --keep and --keep-agent (policy/keep.go, agentcfg).
func registerKeepFlags(fs *flag.FlagSet, opts *policy.Options) {
	fs.Var(listFlag{&opts.Keep}, "keep", "keep `PATH` below HOME: bound writable through the HOME overlay, so writes reach the host (repeatable)")
	fs.Var(listFlag{&opts.KeepAgent}, "keep-agent", "keep what `AGENT` ("+strings.Join(agentcfg.Names(), ", ")+") needs below HOME; its exec surface is read-only or audited (repeatable)")
}
