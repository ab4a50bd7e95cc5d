package behaviour

import (
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestSSHAgentForwardRefused: under --allow-net the --ssh-agent filter serves no
// agent forwarded with ssh -A. ssh binds each forwarded connection for the
// forwarding, which the filter refuses, and then relays what the remote host sends;
// the remote's ssh to its next hop (here the same allowed sshd, run from the host)
// must get no signature, while the first hop from inside is signed.
func TestSSHAgentForwardRefused(t *testing.T) {
	s := startSSH(t)
	knownHost(t, s.hostPub)
	user := testenv.TestUser(t).Name
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			hop := "ssh -o BatchMode=yes -o StrictHostKeyChecking=yes -p " + s.port + " " + user + "@127.0.0.1 echo second-hop"
			cmd := b.command(b.repo, []string{"--ssh-key", "key1", "--allow-net", "127.0.0.1:" + s.port},
				`eval "$GIT_SSH_COMMAND -A -o BatchMode=yes -p $PORT $SSHUSER@127.0.0.1 echo first-hop \; '$HOP'" 2>&1`)
			cmd.Env = append(cmd.Env, "SSH_AUTH_SOCK="+s.agent, "PORT="+s.port, "SSHUSER="+user, "HOP="+hop)
			r := run(cmd)
			if !strings.Contains(r.stdout, "first-hop") {
				t.Fatalf("the first hop from inside, through --allow-net's proxy:\n%s", r)
			}
			if strings.Contains(r.stdout, "second-hop") || !strings.Contains(r.stdout, "Permission denied") {
				t.Fatalf("the remote host signed through the agent forwarded from inside:\n%s", r)
			}
		})
	}
}
