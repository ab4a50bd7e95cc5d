package behaviour

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// sshSetup is a real ssh-agent of the test user holding key1 and key2, and a real
// sshd of the test user on loopback (its own host key, key1 authorized) serving a
// bare repository.
type sshSetup struct {
	dir, agent, port, hostPub, bare string
	fp1                             string
}

func need(t *testing.T, tools ...string) {
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Skip(t, "%s missing (scripts/setup-test-env.sh installs openssh-client and openssh-server)", tool)
		}
	}
}

func startSSH(t *testing.T) *sshSetup {
	need(t, "ssh", "ssh-agent", "ssh-add", "ssh-keygen", "/usr/sbin/sshd")
	tmp, err := os.MkdirTemp("/tmp", "ssh-agentbox-test-") // like ssh-agent's own, below /tmp
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	testenv.Chown(t, tmp)
	s := &sshSetup{dir: testenv.Dir(t, "ssh"), agent: filepath.Join(tmp, "agent.sock")}
	home := s.dir
	as := func(name string, args ...string) string {
		t.Helper()
		cmd := testenv.Command(t, home, name, args...)
		cmd.Env = append(cmd.Env, "SSH_AUTH_SOCK="+s.agent)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	agent := testenv.Command(t, home, "ssh-agent", "-D", "-a", s.agent)
	agent.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Process.Kill(); agent.Wait() })
	if !waitFor(func() bool { _, err := os.Stat(s.agent); return err == nil }) {
		t.Fatal("ssh-agent did not start")
	}
	for _, k := range []string{"key1", "key2", "hostkey"} {
		as("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", k, "-f", filepath.Join(s.dir, k))
	}
	as("ssh-add", filepath.Join(s.dir, "key1"), filepath.Join(s.dir, "key2"))
	s.fp1 = strings.Fields(as("ssh-keygen", "-l", "-E", "sha256", "-f", filepath.Join(s.dir, "key1.pub")))[1]
	pub, _ := os.ReadFile(filepath.Join(s.dir, "key1.pub"))
	writeFile(t, filepath.Join(s.dir, "authorized_keys"), string(pub))
	s.bare = filepath.Join(s.dir, "bare.git")
	as("git", "init", "-q", "--bare", s.bare)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, s.port, _ = net.SplitHostPort(l.Addr().String())
	l.Close()
	cfg := fmt.Sprintf("Port %s\nListenAddress 127.0.0.1\nHostKey %s/hostkey\nAuthorizedKeysFile %s/authorized_keys\nPidFile none\nUsePAM no\nStrictModes no\n", s.port, s.dir, s.dir)
	writeFile(t, filepath.Join(s.dir, "sshd_config"), cfg)
	testenv.Chown(t, s.dir)
	sshd := testenv.Command(t, home, "/usr/sbin/sshd", "-D", "-e", "-f", filepath.Join(s.dir, "sshd_config"))
	sshd.SysProcAttr.Setpgid, sshd.SysProcAttr.Pdeathsig = true, syscall.SIGKILL
	if err := sshd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-sshd.Process.Pid, syscall.SIGKILL); sshd.Wait() })
	if !waitFor(func() bool {
		c, err := net.Dial("tcp", "127.0.0.1:"+s.port)
		if err == nil {
			c.Close()
		}
		return err == nil
	}) {
		t.Fatal("sshd did not start")
	}
	hp, _ := os.ReadFile(filepath.Join(s.dir, "hostkey.pub"))
	f := strings.Fields(string(hp))
	s.hostPub = fmt.Sprintf("[127.0.0.1]:%s %s %s\n", s.port, f[0], f[1])
	return s
}

// TestSSHAgent: --ssh-agent / --ssh-key (issue 34) on every backend, with the real
// OpenSSH: inside, ssh-add lists only the named key and cannot add, remove or lock;
// git push over ssh through --allow-net's proxy signs with it (no ssh
// configuration written), and not with the other key; the record lists the
// signatures; bad input is one line and 125.
func TestSSHAgent(t *testing.T) {
	s := startSSH(t)
	knownHost(t, s.hostPub)
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			askpass := filepath.Join(s.dir, "askpass")
			writeFile(t, askpass, "#!/bin/sh\necho pw\n")
			os.Chmod(askpass, 0o755)
			cmd := b.command(b.repo, []string{"--ssh-key", "key1"}, `ssh-add -l; test "$SSH_AUTH_SOCK" = "$HOST_SOCK" && echo host-socket
ssh-add -D >/dev/null 2>&1 && echo removed
ssh-add `+s.dir+`/key2 >/dev/null 2>&1 && echo added
SSH_ASKPASS=`+askpass+` SSH_ASKPASS_REQUIRE=force ssh-add -x >/dev/null 2>&1 && echo locked
true`)
			cmd.Env = append(cmd.Env, "SSH_AUTH_SOCK="+s.agent, "HOST_SOCK="+s.agent)
			r := run(cmd)
			if r.code != 0 || !strings.Contains(r.stdout, "key1") || strings.Contains(r.stdout, "key2") ||
				strings.Contains(r.stdout, "host-socket") || strings.Contains(r.stdout, "removed") ||
				strings.Contains(r.stdout, "added") || strings.Contains(r.stdout, "locked") {
				t.Fatalf("ssh-add inside with --ssh-key key1:\n%s", r)
			}
			check := testenv.Command(t, s.dir, "ssh-add", "-l")
			check.Env = append(check.Env, "SSH_AUTH_SOCK="+s.agent)
			if out, err := check.CombinedOutput(); err != nil || strings.Count(string(out), "ED25519") != 2 {
				t.Fatalf("the user's agent changed: %v\n%s", err, out)
			}

			dry := b.command(b.repo, []string{"--dry-run", "--ssh-key", "key1"}, "")
			dry.Env = append(dry.Env, "SSH_AUTH_SOCK="+s.agent)
			if r := run(dry); r.code != 0 || !strings.Contains(r.stdout, "/tmp/agentbox-ssh-SESSION") {
				t.Errorf("--dry-run does not show the agent's socket:\n%s", r)
			}

			url := fmt.Sprintf("ssh://%s@127.0.0.1:%s%s", testenv.TestUser(t).Name, s.port, s.bare)
			push := func(key string) result {
				cmd := b.command(b.repo, []string{"--ssh-key", key, "--allow-net", "127.0.0.1:" + s.port, "--allow-git-push"},
					`git commit -q --allow-empty -m one && GIT_SSH_VARIANT=ssh git push -q "$URL" HEAD:refs/heads/`+backend+` 2>&1`)
				cmd.Env = append(cmd.Env, "SSH_AUTH_SOCK="+s.agent, "URL="+url)
				return run(cmd)
			}
			if r := push("key2"); r.code == 0 || !strings.Contains(r.stdout, "Permission denied") {
				t.Fatalf("git push signed with key2 (not authorized) succeeded:\n%s", r)
			}
			if r := push(s.dir + "/key1.pub"); r.code != 0 {
				t.Fatalf("git push over ssh with --ssh-key key1 --allow-net 127.0.0.1:%s:\n%s", s.port, r)
			}
			out, err := testenv.Command(t, s.dir, "git", "--git-dir", s.bare, "rev-parse", "refs/heads/"+backend).CombinedOutput()
			if err != nil {
				t.Fatalf("pushed branch missing: %v %s", err, out)
			}
			checkAgentRecord(t, b, s)

			for _, c := range []struct {
				args []string
				env  string
				why  string
			}{
				{[]string{"--ssh-agent"}, "SSH_AUTH_SOCK=", "SSH_AUTH_SOCK is not set"},
				{[]string{"--ssh-key", "nothing-like-this"}, "SSH_AUTH_SOCK=" + s.agent, "matches no key"},
				{[]string{"--ssh-key", s.dir + "/missing.pub"}, "SSH_AUTH_SOCK=" + s.agent, "does not exist"},
			} {
				cmd := b.command(b.repo, c.args, "echo RAN")
				cmd.Env = append(cmd.Env, c.env)
				r := run(cmd)
				if lines := strings.Split(strings.TrimSpace(r.stderr), "\n"); r.code != 125 || len(lines) != 1 || !strings.Contains(r.stderr, c.why) || strings.Contains(r.stdout, "RAN") {
					t.Errorf("%v with %s: want 125 and one line with %q, got %s", c.args, c.env, c.why, r)
				}
			}
		})
	}
}

// checkAgentRecord: the last session's record lists the allowed signature with
// key1's fingerprint and the host, and agentbox show prints it.
func checkAgentRecord(t *testing.T, b *box, s *sshSetup) {
	t.Helper()
	log := run(b.fixture().Agentbox(b.repo, "log"))
	lines := strings.Split(strings.TrimSpace(log.stdout), "\n")
	if log.code != 0 || len(lines) < 2 {
		t.Fatalf("agentbox log:\n%s", log)
	}
	id := strings.Fields(lines[1])[0]
	show := run(b.fixture().Agentbox(b.repo, "show", "--json", id))
	var rec struct {
		Policy struct {
			SSHAgent bool     `json:"ssh_agent"`
			SSHKeys  []string `json:"ssh_keys"`
		} `json:"policy"`
		SSHAgent []struct {
			Op, Key, Host string
			Allowed       bool
		} `json:"ssh_agent"`
	}
	if err := json.Unmarshal([]byte(show.stdout), &rec); err != nil {
		t.Fatalf("agentbox show --json: %v\n%s", err, show)
	}
	host := "[127.0.0.1]:" + s.port
	found := false
	for _, e := range rec.SSHAgent {
		found = found || e.Op == "sign" && e.Allowed && e.Key == s.fp1 && e.Host == host
	}
	if !rec.Policy.SSHAgent || len(rec.Policy.SSHKeys) != 1 {
		t.Errorf("record: policy ssh_agent %v ssh_keys %q", rec.Policy.SSHAgent, rec.Policy.SSHKeys)
	}
	if !found {
		t.Fatalf("record: no allowed signature by %s for %s: %+v\n%s", s.fp1, host, rec.SSHAgent, show.stdout)
	}
	text := run(b.fixture().Agentbox(b.repo, "show", id))
	if !strings.Contains(text.stdout, "sign "+s.fp1+" host "+host+": allowed") {
		t.Errorf("agentbox show does not list the signature:\n%s", text.stdout)
	}
}

// knownHost adds line to the known_hosts where ssh looks: below the test user's
// passwd home (not $HOME), removed again when the test ends. The sshd's port is
// this test's own, so no other test's entry is touched.
func knownHost(t *testing.T, line string) {
	t.Helper()
	u, err := user.Lookup(testenv.TestUser(t).Name)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(u.HomeDir, ".ssh")
	created := false
	if _, err := os.Stat(dir); err != nil {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		testenv.Chown(t, dir)
		created = true
	}
	file := filepath.Join(dir, "known_hosts")
	old, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	writeFile(t, file, string(old)+line)
	testenv.Chown(t, file)
	t.Cleanup(func() {
		switch {
		case created:
			os.RemoveAll(dir)
		case old == nil:
			os.Remove(file)
		default:
			os.WriteFile(file, old, 0o600)
		}
	})
}
