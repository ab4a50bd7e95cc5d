package policy

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSSHAgent(t *testing.T) {
	home, repo := tree(t)
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	base := Options{Cwd: repo, Home: home, SSHAuthSock: sock}
	for _, tc := range []struct {
		name    string
		mod     func(o *Options)
		agent   string
		keys    []string
		refusal string
	}{
		{"off", func(o *Options) {}, "", nil, ""},
		{"every key", func(o *Options) { o.SSHAgent = true }, sock, nil, ""},
		{"a key implies the agent", func(o *Options) { o.SSHKey = []string{"me@host", "SHA256:x"} }, sock, []string{"me@host", "SHA256:x"}, ""},
		{"turned off by false", func(o *Options) { o.SSHKey = []string{"k"}; o.NoSSHAgent = true }, "", nil, ""},
		{"no agent on the host", func(o *Options) { o.SSHAgent, o.SSHAuthSock = true, "" }, "", nil, "SSH_AUTH_SOCK is not set"},
		{"agent not a socket", func(o *Options) { o.SSHAgent, o.SSHAuthSock = true, file }, "", nil, "not a Unix socket"},
		{"agent relative", func(o *Options) { o.SSHAgent, o.SSHAuthSock = true, "agent" }, "", nil, "absolute"},
		{"key file missing", func(o *Options) { o.SSHKey = []string{"/nonexistent/id.pub"} }, "", nil, "does not exist"},
		{"the same agent handed in unfiltered", func(o *Options) { o.SSHAgent, o.AllowSocket = true, []string{sock} }, "", nil, "unfiltered"},
		{"key file not a key", func(o *Options) { o.SSHKey = []string{file} }, "", nil, "not an OpenSSH public key"},
	} {
		o := base
		tc.mod(&o)
		p, err := New(o)
		switch {
		case tc.refusal != "":
			if err == nil || !strings.Contains(err.Error(), tc.refusal) || strings.Contains(err.Error(), "\n") {
				t.Errorf("%s: err = %v, want one line with %q", tc.name, err, tc.refusal)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case p.SSHAgent != tc.agent || !slices.Equal(p.SSHKeys, tc.keys):
			t.Errorf("%s: agent %q keys %q, want %q %q", tc.name, p.SSHAgent, p.SSHKeys, tc.agent, tc.keys)
		}
	}
}
