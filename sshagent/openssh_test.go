package sshagent

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// openssh is a real ssh-agent holding two keys, "key1" and "key2", in dir.
type openssh struct {
	dir, agent string
}

func need(t *testing.T, tools ...string) {
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Skip(t, "need %s (apt-get install openssh-client openssh-server)", tool)
		}
	}
}

func run(t *testing.T, env []string, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func startOpenSSHAgent(t *testing.T) *openssh {
	need(t, "ssh-agent", "ssh-add", "ssh-keygen")
	dir := t.TempDir()
	o := &openssh{dir: dir, agent: filepath.Join(dir, "agent.sock")}
	cmd := exec.Command("ssh-agent", "-D", "-a", o.agent)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// Connectable, not only there: the socket's file exists from bind(2), a
	// moment before listen(2). Bounded against a hang, not timed.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("unix", o.agent); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("ssh-agent did not start")
		}
	}
	for _, k := range []string{"key1", "key2"} {
		if out, err := run(t, nil, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", k, "-f", filepath.Join(dir, k)); err != nil {
			t.Fatalf("ssh-keygen: %v\n%s", err, out)
		}
		if out, err := run(t, []string{"SSH_AUTH_SOCK=" + o.agent}, "ssh-add", filepath.Join(dir, k)); err != nil {
			t.Fatalf("ssh-add: %v\n%s", err, out)
		}
	}
	return o
}

func (o *openssh) filter(t *testing.T, cfg Config, keys ...string) (string, *Server) {
	var sels []Selector
	for _, k := range keys {
		s, err := ParseSelector(k)
		if err != nil {
			t.Fatal(err)
		}
		sels = append(sels, s)
	}
	cfg.Upstream, cfg.Keys = o.agent, NewAllowed(sels)
	return serveFilter(t, cfg)
}

// TestOpenSSHAgentClient: the real ssh-add through the filter lists only the
// chosen key and cannot change the user's agent.
func TestOpenSSHAgentClient(t *testing.T) {
	o := startOpenSSHAgent(t)
	path, s := o.filter(t, Config{}, filepath.Join(o.dir, "key1.pub"))
	env := []string{"SSH_AUTH_SOCK=" + path}
	out, err := run(t, env, "ssh-add", "-l")
	if err != nil || !strings.Contains(out, "key1") || strings.Contains(out, "key2") {
		t.Fatalf("ssh-add -l = %v\n%s\nwant key1 only", err, out)
	}
	for _, args := range [][]string{{"-D"}, {"-d", filepath.Join(o.dir, "key1")}, {filepath.Join(o.dir, "key2")}} {
		if out, err := run(t, env, "ssh-add", args...); err == nil {
			t.Errorf("ssh-add %v through the filter succeeded:\n%s", args, out)
		}
	}
	lock := exec.Command("ssh-add", "-x")
	lock.Env = append(os.Environ(), env...)
	lock.Stdin = strings.NewReader("pw\npw\n")
	if out, err := lock.CombinedOutput(); err == nil && !strings.Contains(string(out), "ailed") {
		t.Errorf("ssh-add -x through the filter: %s", out)
	}
	if out, err := run(t, []string{"SSH_AUTH_SOCK=" + o.agent}, "ssh-add", "-l"); err != nil || strings.Count(out, "ED25519") != 2 {
		t.Fatalf("the user's agent changed: %v\n%s", err, out)
	}
	// Signing (ssh-keygen -Y sign asks the agent for a key it lists).
	msg := filepath.Join(o.dir, "msg")
	os.WriteFile(msg, []byte("hello"), 0o600)
	if out, err := run(t, env, "ssh-keygen", "-Y", "sign", "-n", "file", "-f", filepath.Join(o.dir, "key1.pub"), msg); err != nil {
		t.Fatalf("sign with key1: %v\n%s", err, out)
	}
	os.Remove(msg + ".sig")
	// Only the public key, so that ssh-keygen cannot fall back on the private one.
	pub2 := filepath.Join(t.TempDir(), "key2.pub")
	b, _ := os.ReadFile(filepath.Join(o.dir, "key2.pub"))
	os.WriteFile(pub2, b, 0o600)
	if out, err := run(t, env, "ssh-keygen", "-Y", "sign", "-n", "file", "-f", pub2, msg); err == nil {
		t.Fatalf("sign with key2 succeeded:\n%s", out)
	}
	ev, _ := s.Events()
	var signs []string
	for _, e := range ev {
		if e.Op == "sign" {
			signs = append(signs, fmt.Sprint(e.Allowed))
		}
	}
	if strings.Join(signs, " ") != "true" { // key2 is not listed, so ssh-keygen never asks
		t.Fatalf("sign events = %+v", ev)
	}
}

// sshd is a real sshd on 127.0.0.1:port that takes key1 and has its host key in
// knownFile (and kh) as [127.0.0.1]:port.
type sshd struct {
	port      int
	knownFile string
	kh        *KnownHosts
	log       *bytes.Buffer
}

func startSSHD(t *testing.T, o *openssh) *sshd {
	need(t, "ssh", "/usr/sbin/sshd")
	port := freePort(t)
	hostKey := filepath.Join(o.dir, "hostkey")
	if out, err := run(t, nil, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", hostKey); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	auth, _ := os.ReadFile(filepath.Join(o.dir, "key1.pub"))
	os.WriteFile(filepath.Join(o.dir, "authorized_keys"), auth, 0o600)
	cfg := fmt.Sprintf("Port %d\nListenAddress 127.0.0.1\nHostKey %s\nAuthorizedKeysFile %s\nPidFile none\nUsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\nAllowAgentForwarding yes\n",
		port, hostKey, filepath.Join(o.dir, "authorized_keys"))
	os.WriteFile(filepath.Join(o.dir, "sshd_config"), []byte(cfg), 0o600)
	os.MkdirAll("/run/sshd", 0o755) // privilege separation directory, when root
	cmd := exec.Command("/usr/sbin/sshd", "-D", "-e", "-f", filepath.Join(o.dir, "sshd_config"))
	d := &sshd{port: port, knownFile: filepath.Join(o.dir, "known_hosts"), log: &bytes.Buffer{}}
	cmd.Stderr = d.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitPort(t, port)
	pub, _ := os.ReadFile(hostKey + ".pub")
	f := strings.Fields(string(pub))
	known := fmt.Sprintf("[127.0.0.1]:%d %s %s\n", port, f[0], f[1])
	os.WriteFile(d.knownFile, []byte(known), 0o600)
	d.kh = ParseKnownHosts(strings.NewReader(known))
	return d
}

// sshArgs are ssh's arguments to run cmd on d as the current user.
func (d *sshd) sshArgs(t *testing.T, cmd ...string) []string {
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"-F", "none", "-o", "BatchMode=yes", "-o", "UserKnownHostsFile=" + d.knownFile,
		"-o", "StrictHostKeyChecking=yes", "-p", fmt.Sprint(d.port), me.Username + "@127.0.0.1"}, cmd...)
}

// TestOpenSSHSessionBind: with rules, the real ssh authenticates to a real sshd
// through the filter only when known_hosts gives the server's host key to an
// allowed host.
func TestOpenSSHSessionBind(t *testing.T) {
	o := startOpenSSHAgent(t)
	d := startSSHD(t, o)
	port, kh := d.port, d.kh
	ssh := func(sock string) (string, error) {
		return run(t, nil, "ssh", append([]string{"-o", "IdentityAgent=" + sock}, d.sshArgs(t, "echo", "in")...)...)
	}
	allowed, s := o.filter(t, Config{Rules: mustRules(t, fmt.Sprintf("127.0.0.1:%d", port)), KnownHosts: kh}, "key1")
	if out, err := ssh(allowed); err != nil || !strings.Contains(out, "in") {
		t.Fatalf("ssh through the filter to an allowed host: %v\n%s\nsshd: %s", err, out, d.log.String())
	}
	ev, _ := s.Events()
	if !hasEvent(ev, "session-bind", true, fmt.Sprintf("[127.0.0.1]:%d", port)) || !hasEvent(ev, "sign", true, fmt.Sprintf("[127.0.0.1]:%d", port)) {
		t.Fatalf("events = %+v", ev)
	}
	other, s2 := o.filter(t, Config{Rules: mustRules(t, fmt.Sprintf("127.0.0.1:%d", port+1)), KnownHosts: kh}, "key1")
	if out, err := ssh(other); err == nil {
		t.Fatalf("ssh through a filter that does not allow the host succeeded:\n%s", out)
	}
	if ev, _ := s2.Events(); !hasEvent(ev, "session-bind", false, "") {
		t.Fatalf("events = %+v", ev)
	}
	wrongKey, _ := o.filter(t, Config{Rules: mustRules(t, fmt.Sprintf("127.0.0.1:%d", port)), KnownHosts: kh}, "key2")
	if out, err := ssh(wrongKey); err == nil {
		t.Fatalf("ssh with only key2 (not authorized) succeeded:\n%s", out)
	}
}

// TestOpenSSHForwardedAgentRefused: with rules, an agent forwarded with ssh -A to
// an allowed host signs nothing there. ssh binds each forwarded connection for the
// forwarding (refused) and then relays what the remote sends over it: the remote's
// own binding to its next hop must not make the connection usable.
func TestOpenSSHForwardedAgentRefused(t *testing.T) {
	o := startOpenSSHAgent(t)
	d := startSSHD(t, o)
	sock, s := o.filter(t, Config{Rules: mustRules(t, fmt.Sprintf("127.0.0.1:%d", d.port)), KnownHosts: d.kh}, "key1")
	// The remote (this machine again) runs ssh to the same allowed host with the
	// forwarded agent.
	hop := "ssh " + strings.Join(d.sshArgs(t, "echo", "second-hop"), " ")
	out, err := run(t, []string{"SSH_AUTH_SOCK=" + sock}, "ssh", append([]string{"-A", "-o", "IdentityAgent=" + sock}, d.sshArgs(t, hop)...)...)
	if !strings.Contains(out, "Permission denied") || strings.Contains(out, "second-hop") {
		t.Fatalf("the second hop through the forwarded agent: %v\n%s\nsshd: %s", err, out, d.log.String())
	}
	// The first hop was signed for; the forwarding's binding and the remote's
	// were refused.
	ev, _ := s.Events()
	binds := 0
	for _, e := range ev {
		if e.Op == "session-bind" {
			binds++
		}
	}
	if !hasEvent(ev, "sign", true, "") || !hasEvent(ev, "session-bind", false, "") || binds < 3 {
		t.Fatalf("events = %+v", ev)
	}
}

func hasEvent(ev []Event, op string, allowed bool, host string) bool {
	for _, e := range ev {
		if e.Op == op && e.Allowed == allowed && (host == "" || e.Host == host) {
			return true
		}
	}
	return false
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitPort waits for sshd to listen on port, bounded against a hang (a loaded
// machine starts it slowly), not timed.
func waitPort(t *testing.T, port int) {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			return
		}
	}
	t.Fatal("sshd did not start")
}
