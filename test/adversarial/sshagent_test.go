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
	for _, tool := range []string{"ssh-agent", "ssh-add", "ssh-keygen", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Skip(t, "%s missing (scripts/setup-test-env.sh installs openssh-client)", tool)
		}
	}
	tmp, err := os.MkdirTemp("/tmp", "ssh-agentbox-hostile-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	testenv.Chown(t, tmp)
	dir := testenv.Dir(t, "keys")
	sock := filepath.Join(tmp, "agent.sock")
	agent := testenv.Command(t, dir, "ssh-agent", "-D", "-a", sock)
	agent.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { agent.Process.Kill(); agent.Wait() }()
	if !sandboxtest.WaitFor(func() bool { _, err := os.Stat(sock); return err == nil }) {
		t.Fatal("ssh-agent did not start")
	}
	for _, c := range [][]string{{"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "only", "-f", dir + "/k"}, {"ssh-add", dir + "/k"}} {
		cmd := testenv.Command(t, dir, c[0], c[1:]...)
		cmd.Env = append(cmd.Env, "SSH_AUTH_SOCK="+sock)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
	}
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
