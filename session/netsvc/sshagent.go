package netsvc

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/pace"
	"github.com/agentbox/agentbox/internal/termsafe"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/netproxy"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/session/leftovers"
	"github.com/agentbox/agentbox/shadow"
	"github.com/agentbox/agentbox/sshagent"
	"golang.org/x/sys/unix"
)

// Agent is a session's --ssh-agent filter (sshagent): goroutines of the
// launcher serving a socket in a directory of its own below /tmp (mode 0700, like
// ssh-agent's), which the plan hands in read-only at its own path as
// --allow-socket hands in a socket, and SSH_AUTH_SOCK names inside.
type Agent struct {
	dir, sock string
	claim     *leftovers.Lock // this launcher's, for agentbox gc and the next launch
	srv       *sshagent.Server
	served    chan struct{}
	stopped   bool
}

// StartAgent checks the keys against the user's agent and starts the filter; nil
// when p has no --ssh-agent. A key that names none of the agent's stops the launch.
func StartAgent(p *policy.Policy) (*Agent, error) {
	if p.SSHAgent == "" {
		return nil, nil
	}
	keys, err := agentKeys(p)
	if err != nil {
		return nil, err
	}
	cfg := sshagent.Config{Upstream: p.SSHAgent, Keys: keys}
	if len(p.AllowNet) > 0 {
		if cfg.Rules, err = netproxy.ParseAll(p.AllowNet); err != nil {
			return nil, err
		}
		cfg.KnownHosts = knownHosts(p.Home)
	}
	// What killed launchers left, collected as `agentbox gc` does (leftovers).
	leftovers.CollectSSHAgent("/tmp")
	// Named and claimed as leftovers wants (mode 0700, like ssh-agent's).
	dir, err := os.MkdirTemp("/tmp", fmt.Sprintf("%s%d-", leftovers.SSHAgentPrefix, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("--ssh-agent: %w", err)
	}
	a := &Agent{dir: dir, sock: filepath.Join(dir, "agent.sock"), srv: sshagent.New(cfg), served: make(chan struct{})}
	var l net.Listener
	if a.claim, err = leftovers.Claim(dir); err == nil {
		l, err = pace.Listen(a.sock, sshagent.MaxConns) // drained at sshagent's pace
	}
	if err != nil {
		os.RemoveAll(dir)
		a.claim.Release()
		return nil, fmt.Errorf("--ssh-agent: %w", err)
	}
	go func() {
		defer close(a.served)
		_ = a.srv.Serve(l)
	}()
	return a, nil
}

// agentKeys are the keys p lets through, checked against the user's agent.
func agentKeys(p *policy.Policy) (*sshagent.Allowed, error) {
	var sels []sshagent.Selector
	for _, k := range p.SSHKeys {
		s, err := sshagent.ParseSelector(k)
		if err != nil {
			return nil, fmt.Errorf("--ssh-key %q: %w", k, err)
		}
		sels = append(sels, s)
	}
	keys := sshagent.NewAllowed(sels)
	ids, err := sshagent.ListIdentities(p.SSHAgent)
	if errors.Is(err, sshagent.ErrForeignAgent) {
		return nil, fmt.Errorf("--ssh-agent: the agent at SSH_AUTH_SOCK %s is %v; start your own ssh-agent and point SSH_AUTH_SOCK at it", termsafe.Quote(p.SSHAgent), err)
	}
	if err != nil {
		return nil, fmt.Errorf("--ssh-agent: cannot list the keys of the agent at SSH_AUTH_SOCK %s: %v; is ssh-agent running?", p.SSHAgent, err)
	}
	if err := keys.Check(ids); err != nil {
		return nil, err
	}
	return keys, nil
}

// DryRunAgent is p with the filter's socket as the plan would hand it in, after
// the same checks as a launch (nil error and p itself without --ssh-agent).
func DryRunAgent(p *policy.Policy) (*policy.Policy, error) {
	if p.SSHAgent == "" {
		return p, nil
	}
	if _, err := agentKeys(p); err != nil {
		return nil, err
	}
	dir := "/tmp/" + leftovers.SSHAgentPrefix + "SESSION"
	return (&Agent{dir: dir, sock: dir + "/agent.sock"}).Policy(p), nil
}

// knownHosts reads the user's and the system's known_hosts as they are before the
// session starts: nothing the session writes later counts. The user's are those
// below $HOME and below the passwd entry's home, which is where ssh looks.
func knownHosts(home string) *sshagent.KnownHosts {
	kh := sshagent.ParseKnownHosts(nil)
	files := []string{"/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"}
	homes := []string{home}
	if u, err := user.Current(); err == nil && u.HomeDir != home {
		homes = append(homes, u.HomeDir)
	}
	for _, h := range homes {
		if h != "" {
			files = append(files, filepath.Join(h, ".ssh/known_hosts"), filepath.Join(h, ".ssh/known_hosts2"))
		}
	}
	for _, f := range files {
		if r, err := openRegular(f); err == nil {
			kh.Add(r)
			r.Close()
		}
	}
	return kh
}

// openRegular opens path for reading without blocking on a FIFO or following a
// final symlink, and only when it is a regular file.
func openRegular(path string) (io.ReadCloser, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), path)
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	return f, nil
}

// Policy is p with the filter's socket handed in (nil a: p itself).
func (a *Agent) Policy(p *policy.Policy) *policy.Policy {
	if a == nil {
		return p
	}
	q := *p
	q.Sockets = append(append([]policy.Socket(nil), p.Sockets...), policy.Socket{Path: a.sock, Bind: a.dir, From: "--ssh-agent: SSH_AUTH_SOCK inside"})
	return &q
}

// SetEnv points the command's SSH_AUTH_SOCK in env at the filter (after
// the session's environment drops the host's).
func (a *Agent) SetEnv(env []string) []string {
	if a == nil {
		return env
	}
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "SSH_AUTH_SOCK=") {
			out = append(out, kv)
		}
	}
	return append(out, "SSH_AUTH_SOCK="+a.sock)
}

// Stop ends the filter with the session and returns what it decided, for the
// record, and notes with a line added when events were dropped. A second call
// returns nothing.
func (a *Agent) Stop(notes []string) ([]shadow.SSHAgentEvent, []string) {
	if a == nil || a.stopped {
		return nil, notes
	}
	a.stopped = true
	a.srv.Close()
	<-a.served
	os.RemoveAll(a.dir)
	a.claim.Release()
	ev, dropped := a.srv.Events()
	if dropped > 0 {
		notes = append(notes, fmt.Sprintf("ssh agent: %d further requests not recorded", dropped))
	}
	out := make([]shadow.SSHAgentEvent, 0, len(ev))
	for _, e := range ev {
		out = append(out, shadow.SSHAgentEvent(e))
	}
	return out, notes
}

// SSHProxyEnv sets GIT_SSH_COMMAND for a session with --allow-net so that Git over
// ssh goes through the proxy with no configuration (sshagent.GitSSHCommand); the
// user's own GIT_SSH_COMMAND wins, and a binary the sandbox cannot see (below the
// private /tmp or /run) or whose path needs quoting sets nothing.
func SSHProxyEnv(p *policy.Policy, gitSSHCommand string) []string {
	if len(p.AllowNet) == 0 || gitSSHCommand != "" {
		return nil
	}
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil || hostpath.Within(exe, "/tmp") || hostpath.Within(exe, "/run") {
		return nil
	}
	cmd, ok := sshagent.GitSSHCommand(exe, mounts.ProxyAddr)
	if !ok {
		return nil
	}
	return []string{"GIT_SSH_COMMAND=" + cmd}
}
