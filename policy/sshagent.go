package policy

import (
	"os"
	"path/filepath"

	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/sshagent"
)

// resolveSSHAgent validates --ssh-agent and --ssh-key (repeatable, implies
// --ssh-agent; --ssh-agent=false turns both off): the host's SSH_AUTH_SOCK must be
// an absolute path to a socket, and each key file given must hold a public key.
// Whether each key names one of the agent's is checked at launch (session), where
// the agent is asked.
func resolveSSHAgent(p *Policy, opts Options) error {
	if opts.NoSSHAgent || !opts.SSHAgent && len(opts.SSHKey) == 0 {
		return nil
	}
	refuse := func(why string) error { return &Error{What: "--ssh-agent", Reason: why} }
	sock := opts.SSHAuthSock
	if sock == "" {
		return refuse("SSH_AUTH_SOCK is not set, so there is no agent to forward to; start ssh-agent and ssh-add your keys, or drop --ssh-agent")
	}
	if !filepath.IsAbs(sock) {
		return &Error{What: "--ssh-agent", Path: sock, Reason: "SSH_AUTH_SOCK is not an absolute path"}
	}
	fi, err := os.Stat(sock)
	if err != nil {
		return &Error{What: "--ssh-agent", Path: sock, Reason: "SSH_AUTH_SOCK: " + reason(err)}
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return &Error{What: "--ssh-agent", Path: sock, Reason: "SSH_AUTH_SOCK is not a Unix socket"}
	}
	for _, k := range opts.SSHKey {
		if _, err := sshagent.ParseSelector(k); err != nil {
			return &Error{What: "--ssh-key", Path: k, Reason: reason(err)}
		}
	}
	p.SSHAgent, p.SSHKeys = filepath.Clean(sock), opts.SSHKey
	return nil
}

// checkAgentNotHandedIn refuses --ssh-agent beside an --allow-socket that hands
// the same agent in unfiltered: the sandbox would simply use that one.
func checkAgentNotHandedIn(p *Policy) error {
	if p.SSHAgent == "" {
		return nil
	}
	agent, err := filepath.EvalSymlinks(p.SSHAgent)
	if err != nil {
		agent = p.SSHAgent
	}
	for _, s := range p.Sockets {
		if hostpath.Within(agent, s.Bind) {
			return &Error{What: "--ssh-agent", Path: s.Path, Reason: "is handed in unfiltered by --allow-socket too; drop that --allow-socket"}
		}
	}
	return nil
}
