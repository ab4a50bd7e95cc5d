package main

import (
	"strings"
	"testing"

	"github.com/agentbox/agentbox/policy"
)

// TestPathSockets: Landlock only where the kernel can deny and --nested-sandbox is
// off; masks otherwise, and below Linux 7.1 the flag changes nothing.
func TestPathSockets(t *testing.T) {
	for _, tc := range []struct {
		canDeny, nested bool
		want            string
	}{{true, false, socketsLandlock}, {true, true, socketsMasks}, {false, false, socketsMasks}, {false, true, socketsMasks}} {
		if got := pathSockets(tc.canDeny, tc.nested); got != tc.want {
			t.Errorf("canDeny %v, nested %v: %s, want %s", tc.canDeny, tc.nested, got, tc.want)
		}
	}
}

// TestNestedSandboxNote: a kept agent on a kernel whose Landlock rule refuses its
// sandbox's mounts gets one line naming --nested-sandbox, unless the user chose
// either way; no agent kept, or the kernel before 7.1: no line.
func TestNestedSandboxNote(t *testing.T) {
	kept := &policy.Policy{KeepAgents: []string{"codex", "claude"}}
	if n := nestedSandboxNote(kept, map[string]string{}, true); !strings.Contains(n, "--nested-sandbox") || !strings.Contains(n, "[claude codex]") {
		t.Errorf("kept agents on 7.1+: %q", n)
	}
	for name, tc := range map[string]struct {
		p       *policy.Policy
		prov    map[string]string
		canDeny bool
	}{
		"before 7.1":           {kept, map[string]string{}, false},
		"no agent":             {&policy.Policy{}, map[string]string{}, true},
		"chosen off in config": {kept, map[string]string{"nested-sandbox": "config.toml:3"}, true},
		"on":                   {&policy.Policy{KeepAgents: kept.KeepAgents, NestedSandbox: true}, map[string]string{"nested-sandbox": "command line"}, true},
	} {
		if n := nestedSandboxNote(tc.p, tc.prov, tc.canDeny); n != "" {
			t.Errorf("%s: %q", name, n)
		}
	}
}
