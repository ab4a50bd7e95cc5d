package adversarial

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// hostileAgentClient is what a hostile sandbox sends the --ssh-agent filter: a
// length of 4 GiB, a flood of connections that each send half a length and hold,
// random bytes on many more, a sign request for a key blob of garbage; then, with
// the flood closed, ssh-add -l must still work; with HOLD set, the flood is left
// open when the command ends (the launcher must still end at once).
const hostileAgentClient = `
import os, socket, struct, random, subprocess, sys, time
p = os.environ["SSH_AUTH_SOCK"]
def conn():
    s = socket.socket(socket.AF_UNIX)
    s.connect(p)
    return s
s = conn()
s.sendall(struct.pack(">I", 0xffffffff) + b"x")
s.settimeout(10)
try:
    got = s.recv(1)
except ConnectionResetError:
    got = b""
print("huge:", "closed" if got == b"" else "answered")
held = []
for i in range(400):
    try:
        c = conn(); c.sendall(b"\0\0"); held.append(c)
    except OSError:
        pass
rnd = random.Random(7)
for i in range(100):
    try:
        c = conn(); c.sendall(bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 3000)))); c.close()
    except OSError:
        pass
blob = b"\x0d" + struct.pack(">I", 3) + b"abc" + struct.pack(">I", 1) + b"d" + b"\0\0\0\0"
if os.environ.get("HOLD"):
    print("holding", len(held)); sys.stdout.flush(); os._exit(0)
for c in held:
    c.close()
for i in range(100):
    try:
        c = conn(); c.sendall(struct.pack(">I", len(blob)) + blob); c.settimeout(10)
        print("garbage sign:", "failure" if c.recv(5)[4:] == b"\x05" else "other")
        break
    except OSError:
        time.sleep(0.1)
for i in range(100):
    r = subprocess.run(["ssh-add", "-l"], capture_output=True, text=True)
    if r.returncode == 0:
        print("after:", r.stdout.strip()); break
    time.sleep(0.1)
`

// TestSSHAgentHostileClient: hostile agent traffic from inside the sandbox does not
// crash or stall the launcher, on every backend.
func TestSSHAgentHostileClient(t *testing.T) {
	sock, _ := startSSHAgent(t, "python3")
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			for _, hold := range []string{"", "1"} {
				cmd := b.Command(b.Repo, []string{"--ssh-agent"}, `python3 -c "$SCRIPT"`)
				cmd.Env = append(cmd.Env, "SSH_AUTH_SOCK="+sock, "SCRIPT="+hostileAgentClient, "HOLD="+hold)
				start := time.Now()
				r := sandboxtest.Run(cmd)
				took := time.Since(start)
				switch {
				case r.Code != 0 || took > 60*time.Second:
					t.Errorf("HOLD=%q: exit %d after %s:\n%s", hold, r.Code, took, r)
				case hold != "" && !strings.Contains(r.Stdout, "holding"):
					t.Errorf("HOLD=%q: %s", hold, r)
				case hold == "" && (!strings.Contains(r.Stdout, "huge: closed") || !strings.Contains(r.Stdout, "garbage sign: failure") || !strings.Contains(r.Stdout, "after: 256 SHA256:")):
					t.Errorf("the filter did not survive the flood:\n%s", r)
				}
			}
		})
	}
}

// startSSHAgent starts an ssh-agent of the test user's, holding one new ed25519
// key (its files: KEYDIR/k, KEYDIR/k.pub), for the rest of the test; tools are
// what the test needs besides OpenSSH's.
func startSSHAgent(t *testing.T, tools ...string) (sock, keyDir string) {
	for _, tool := range append([]string{"ssh-agent", "ssh-add", "ssh-keygen"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Skip(t, "%s missing (scripts/setup-test-env.sh installs openssh-client)", tool)
		}
	}
	tmp, err := os.MkdirTemp("/tmp", "ssh-agentbox-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	testenv.Chown(t, tmp)
	keyDir = testenv.Dir(t, "keys")
	sock = filepath.Join(tmp, "agent.sock")
	agent := testenv.Command(t, keyDir, "ssh-agent", "-D", "-a", sock)
	agent.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Process.Kill(); agent.Wait() })
	if !sandboxtest.WaitFor(func() bool { _, err := os.Stat(sock); return err == nil }) {
		t.Fatal("ssh-agent did not start")
	}
	for _, c := range [][]string{{"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "only", "-f", keyDir + "/k"}, {"ssh-add", keyDir + "/k"}} {
		cmd := testenv.Command(t, keyDir, c[0], c[1:]...)
		cmd.Env = append(cmd.Env, "SSH_AUTH_SOCK="+sock)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
	}
	return sock, keyDir
}

// TestSSHKeyFilePlanted: a --ssh-key file is read on the host at every launch,
// and may lie where a session writes (here the repository, as a project's deploy
// key; a kept ~/.ssh likewise). A session replaces it with a FIFO, or a link to
// a device: the next launch must refuse at once with one line, not hang on the
// FIFO for good (as it did) nor open the device.
func TestSSHKeyFilePlanted(t *testing.T) {
	sock, keyDir := startSSHAgent(t)
	pub := sandboxtest.ReadFile(t, keyDir+"/k.pub")
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			key := filepath.Join(b.Repo, "deploy.pub")
			sandboxtest.WriteFile(t, key, pub)
			testenv.Chown(t, key)
			launch := func() sandboxtest.Result {
				cmd := b.Command(b.Repo, []string{"--ssh-key", key}, "ssh-add -l")
				cmd.Env = append(cmd.Env, "SSH_AUTH_SOCK="+sock)
				return runCmdBounded(t, cmd)
			}
			if r := launch(); r.Code != 0 || !strings.Contains(r.Stdout, "only") {
				t.Fatalf("the key as a regular file is not served:\n%s", r)
			}
			for _, plant := range []string{`mkfifo "$K"`, `ln -s /dev/zero "$K"`, `ln -s /dev/tty "$K"`} {
				if r := b.Sh(`K="$REPO/deploy.pub"; rm -f "$K" && ` + plant); r.Code != 0 {
					t.Fatalf("plant %q: %s", plant, r)
				}
				r := launch()
				if r.Code != 125 || !strings.Contains(r.Stderr, "not a regular file") || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 {
					t.Errorf("after %q: want exit 125 and one line saying the key is not a regular file:\n%s", plant, r)
				}
			}
		})
	}
}
