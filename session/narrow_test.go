package session

import (
	"reflect"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/policy"
)

// TestNarrowsKnowsEveryConfigField: every field of Config is classified for a
// repository's file (narrowClass). An unclassified one must be equal, so a launch
// with a repository file stops when it differs; its author must say how it narrows.
func TestNarrowsKnowsEveryConfigField(t *testing.T) {
	ty := reflect.TypeFor[Config]()
	for i := range ty.NumField() {
		if name := ty.Field(i).Name; narrowClass(name) == narrowUnknown {
			t.Errorf("Config.%s has no class in narrowClass (session/narrow.go): say how a repository's file may change it", name)
		}
	}
}

// TestNarrowsSession: the push guard may only turn on; the snapshot and the record
// are the user's alone; the policy is policy.Narrows'.
func TestNarrowsSession(t *testing.T) {
	pol := &policy.Policy{Repo: "/r", AllowNet: []string{"a.test"}}
	before := Config{Policy: pol, AllowGitPush: true}
	for _, tc := range []struct {
		name   string
		change func(c *Config)
		widens string
	}{
		{"same", func(c *Config) {}, ""},
		{"push guard on", func(c *Config) { c.AllowGitPush = false }, ""},
		{"output elsewhere", func(c *Config) { c.DryRun, c.Args = DryRunText, []string{"x"} }, ""},
		{"snapshot off", func(c *Config) { c.GitSave.Disabled = true }, "GitSave"},
		{"snapshot elsewhere", func(c *Config) { c.GitSave.Dir = "/r/snaps" }, "GitSave"},
		{"record off", func(c *Config) { c.NoRecord = true }, "NoRecord"},
		{"no network namespace", func(c *Config) { c.Policy = &policy.Policy{Repo: "/r"} }, "network namespace"},
	} {
		after := before
		tc.change(&after)
		err := Narrows(&before, &after)
		switch {
		case tc.widens == "" && err != nil:
			t.Errorf("%s: refused a narrowing: %v", tc.name, err)
		case tc.widens != "" && (err == nil || !strings.Contains(err.Error(), tc.widens)):
			t.Errorf("%s: want a widening naming %q, got %v", tc.name, tc.widens, err)
		}
	}
	guarded := Config{Policy: pol}
	open := Config{Policy: pol, AllowGitPush: true}
	if err := Narrows(&guarded, &open); err == nil || !strings.Contains(err.Error(), "push guard") {
		t.Errorf("the push guard turned off: %v", err)
	}
}
