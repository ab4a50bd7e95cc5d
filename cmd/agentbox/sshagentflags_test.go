package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/config"
	"github.com/agentbox/agentbox/policy"
)

// TestRepoFileSSHAgent: a repository's file may turn --ssh-agent off, also where
// the user named keys, and may neither turn it on nor name keys.
func TestRepoFileSSHAgent(t *testing.T) {
	x := newRepoFixture(t)
	sock := x.vocab[5]
	for _, v := range []string{"XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"} {
		t.Setenv(v, "")
	}
	t.Setenv("HOME", x.home)
	for _, c := range []struct {
		user    []string
		file    string
		agent   bool
		refused string
	}{
		{[]string{"--ssh-key", "k1"}, "", true, ""},
		{[]string{"--ssh-key", "k1"}, "ssh-agent = false\n", false, ""},
		{[]string{"--ssh-agent"}, "ssh-agent = false\n", false, ""},
		{nil, "ssh-agent = true\n", false, "ssh-agent"},
		{[]string{"--ssh-key", "k1"}, "ssh-key = [\"k1\"]\n", false, "ssh-key"},
	} {
		var cl execArgs
		clFlags := cl.flags()
		if err := clFlags.Parse(c.user); err != nil {
			t.Fatal(err)
		}
		a, fs, prov, err := layered(c.user, clFlags, "")
		if err != nil {
			t.Fatal(err)
		}
		a.opts.Cwd, a.opts.Home, a.opts.SSHAuthSock = x.repo, x.home, sock
		pol, err := policy.New(a.opts)
		if err != nil {
			t.Fatal(err)
		}
		rf, err := config.Parse(filepath.Join(x.repo, config.RepoFile), []byte(c.file))
		if err != nil {
			t.Fatal(err)
		}
		after, _, err := narrowBy(a, fs, prov, pol, rf)
		switch {
		case c.refused != "":
			if err == nil || !strings.Contains(err.Error(), c.refused) {
				t.Errorf("%v + %q: err = %v, want a refusal naming %s", c.user, c.file, err, c.refused)
			}
		case err != nil:
			t.Errorf("%v + %q: %v", c.user, c.file, err)
		case (after.SSHAgent != "") != c.agent:
			t.Errorf("%v + %q: agent %q, want on=%v", c.user, c.file, after.SSHAgent, c.agent)
		}
	}
}
