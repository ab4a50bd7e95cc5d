package adversarial

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// connectLoop waits for the test's go, then connects to the launcher's socket
// named by $SOCKVAR 50,000 times without waiting; on a connection that was queued
// it sends a message past the endpoint's size bound (refused unread, so that no
// checkpoint's or signature's own work, bounded apart, mixes in) and closes it.
// Then it makes one ordinary request until it gets an answer, and reports the CPU
// time the loop took in this process, in microseconds.
const connectLoop = `
import os, resource, socket, subprocess, time
p = os.environ[os.environ["SOCKVAR"]]
open("ready", "w").close()
for _ in range(3000):
    if os.path.exists("go"):
        break
    time.sleep(0.02)
r0 = resource.getrusage(resource.RUSAGE_SELF)
queued = 0
big = b"x" * 5000
for _ in range(50000):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
    if s.connect_ex(p) == 0:
        queued += 1
        try:
            s.send(big)
        except OSError:
            pass
    s.close()
r1 = resource.getrusage(resource.RUSAGE_SELF)
def checkpoint():
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(p)
        s.sendall(b"after the loop")
        s.shutdown(socket.SHUT_WR)
        return s.makefile("rb").readline().decode().strip()
    except OSError:
        return ""
    finally:
        s.close()
def agent():
    r = subprocess.run(["ssh-add", "-l"], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else ""
ask = checkpoint if os.environ["SOCKVAR"] == "AGENTBOX_CHECKPOINT" else agent
answer = "none"
for _ in range(600):
    a = ask()
    if a:
        answer = a
        break
    time.sleep(0.1)
cpu = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * 1e6
with open("done.tmp", "w") as f:
    f.write("%d %d %s\n" % (cpu, queued, answer))
os.rename("done.tmp", "done")
`

// TestLauncherSocketsConnectLoop: the launcher serves the checkpoint endpoint and
// the --ssh-agent filter from outside the session's cgroup, so what it spends on
// them is outside --cpus. Each connection cost it (accept, a goroutine, a read, an
// answer, a close) about twice what connect(2) cost the sandbox: a connect loop
// inside made the host spend more than twice the session's CPU limit on top of it,
// for as long as it ran. Both take connections from a short backlog at a fixed
// pace (internal/pace), so the loop gets EAGAIN and the launcher's CPU time stays a
// small part of the loop's; a request after the loop is still answered. Every
// runner.
func TestLauncherSocketsConnectLoop(t *testing.T) {
	needAgentTools(t)
	agentSock := startKeyedAgent(t)
	for _, runner := range everyRunner(t) {
		t.Run(runner, func(t *testing.T) {
			b := sandboxtest.NewBox(t, runner)
			t.Run("checkpoint", func(t *testing.T) {
				loopLauncherSocket(t, b, nil, "AGENTBOX_CHECKPOINT", "ok")
			})
			t.Run("ssh-agent", func(t *testing.T) {
				loopLauncherSocket(t, b, []string{"--ssh-agent", "SSH_AUTH_SOCK=" + agentSock}, "SSH_AUTH_SOCK", "256")
			})
		})
	}
}

// loopLauncherSocket runs connectLoop against the socket in sockVar of a session
// started with args (an argument holding "=" goes to the environment) and checks
// the launcher's CPU time over the loop, and that the answer after it starts with
// answer (a checkpoint may also be refused as too soon).
func loopLauncherSocket(t *testing.T, b *sandboxtest.Box, args []string, sockVar, answer string) {
	var flags, env []string
	for _, a := range args {
		if strings.Contains(a, "=") {
			env = append(env, a)
		} else {
			flags = append(flags, a)
		}
	}
	fields, spent, r := runLoop(t, b, flags, append(env, "SOCKVAR="+sockVar), connectLoop)
	if len(fields) < 3 {
		t.Fatalf("the loop's report: %q\n%s", fields, r)
	}
	loop, _ := strconv.ParseInt(fields[0], 10, 64)
	after := strings.Join(fields[2:], " ")
	t.Logf("loop: %d µs of CPU, %s connections queued; launcher: %d µs; the request after: %s", loop, fields[1], spent, after)
	if fields[2] != answer && !strings.HasPrefix(after, "refused: too soon") {
		t.Errorf("the request after the loop got %q, want %s…", after, answer)
	}
	if spent*4 > loop {
		t.Errorf("the launcher spent %d µs of CPU serving a connect loop that took the sandbox %d µs: more than a quarter, outside the session's cgroup", spent, loop)
	}
	if r.Code != 0 {
		t.Errorf("the session failed:\n%s", r)
	}
}

// runLoop runs the Python script in a session started with flags and env, a
// script that writes ready, waits for the test's go, runs its loop and writes its
// report to done; it returns the report's fields, the launcher's CPU time from go
// to done in microseconds, and the session's result.
func runLoop(t *testing.T, b *sandboxtest.Box, flags, env []string, script string) ([]string, int64, sandboxtest.Result) {
	t.Helper()
	for _, f := range []string{"ready", "go", "done"} {
		os.Remove(filepath.Join(b.Repo, f))
	}
	cmd := b.Command(b.Repo, append([]string{"--no-git-save"}, flags...), `python3 -c "$SCRIPT"`)
	cmd.Env = append(append(cmd.Env, env...), "SCRIPT="+script)
	ended := start(t, cmd)
	if r, ok := untilReady(filepath.Join(b.Repo, "ready"), ended); !ok {
		t.Fatalf("the session never started its loop:\n%s", r)
	}
	before := processCPU(t, cmd.Process.Pid)
	sandboxtest.WriteFile(t, filepath.Join(b.Repo, "go"), "")
	if r, ok := untilReady(filepath.Join(b.Repo, "done"), ended); !ok {
		t.Fatalf("the session never finished its loop:\n%s", r)
	}
	spent := processCPU(t, cmd.Process.Pid) - before
	r := <-ended
	return strings.Fields(sandboxtest.ReadFile(t, filepath.Join(b.Repo, "done"))), spent, r
}

// needAgentTools skips (fails, in a strict run) without the tools the ssh-agent
// loops use.
func needAgentTools(t *testing.T) {
	for _, tool := range []string{"python3", "ssh-agent", "ssh-add", "ssh-keygen"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Skip(t, "%s missing (scripts/setup-test-env.sh installs it)", tool)
		}
	}
}

// startKeyedAgent starts an ssh-agent of the test user's holding one key, for the
// test's length, and returns its socket.
func startKeyedAgent(t *testing.T) string {
	tmp, err := os.MkdirTemp("/tmp", "ssh-agentbox-loop-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	testenv.Chown(t, tmp)
	dir := testenv.Dir(t, "keys")
	sock := filepath.Join(tmp, "agent.sock")
	agent := testenv.Command(t, dir, "ssh-agent", "-D", "-a", sock)
	agent.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Process.Kill(); agent.Wait() })
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
	return sock
}

// processCPU is the CPU time (user and system, every thread) pid has used, in
// microseconds.
func processCPU(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command name, which may hold spaces: state is the first.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return (utime + stime) * 1e6 / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on every Linux ABI Go
// builds for.
const clockTicks = 100

// bindLoop waits for the test's go, then sends 400 session-binds on one
// connection to the --ssh-agent filter, each with a 16376-bit RSA host key and a
// signature of its length, reading each answer, and reports the CPU time the
// loop took in this process, in microseconds, and how many answers it read.
const bindLoop = `
import os, resource, socket, struct, time
def s(b): return struct.pack(">I", len(b)) + b
n = b"\x00" + b"\xff" * 2047
key = s(b"ssh-rsa") + s(b"\x01\x00\x01") + s(n)
sig = s(b"rsa-sha2-512") + s(b"\x01" * 2047)
body = b"\x1b" + s(b"session-bind@openssh.com") + s(key) + s(b"\x07" * 32) + s(sig) + b"\x00"
msg = s(body)
open("ready", "w").close()
for _ in range(3000):
    if os.path.exists("go"):
        break
    time.sleep(0.02)
c = socket.socket(socket.AF_UNIX)
c.connect(os.environ["SSH_AUTH_SOCK"])
f = c.makefile("rb")
r0 = resource.getrusage(resource.RUSAGE_SELF)
answers = 0
for _ in range(400):
    c.sendall(msg)
    hdr = f.read(4)
    if len(hdr) < 4:
        break
    f.read(struct.unpack(">I", hdr)[0])
    answers += 1
r1 = resource.getrusage(resource.RUSAGE_SELF)
cpu = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * 1e6
with open("done.tmp", "w") as out:
    out.write("%d %d\n" % (cpu, answers))
os.rename("done.tmp", "done")
`

// TestSSHAgentBindLoop: the --ssh-agent filter verified every session-bind's
// host signature, whatever the host key's size, as often as one connection sent
// one: a 16376-bit RSA key cost the launcher, outside the session's cgroup, 15-40
// ms of CPU for a message that cost the sandbox a write (400 of them: seconds).
// Now RSA host keys past 8192 bits are refused unverified, a connection takes at
// most 16 binds (one with --allow-net), and verifications run at most 10 a second
// after a burst: the launcher spends well under a millisecond a message (the
// bound is 2 ms: the message gate spreads the loop over about two seconds, whose
// idle wake-ups count too).
func TestSSHAgentBindLoop(t *testing.T) {
	needAgentTools(t)
	agentSock := startKeyedAgent(t)
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			fields, spent, r := runLoop(t, sandboxtest.NewBox(t, backend), []string{"--ssh-agent"}, []string{"SSH_AUTH_SOCK=" + agentSock}, bindLoop)
			if len(fields) != 2 {
				t.Fatalf("the loop's report: %q\n%s", fields, r)
			}
			t.Logf("loop: %s µs of CPU, %s answers; launcher: %d µs", fields[0], fields[1], spent)
			if fields[1] != "400" {
				t.Errorf("the filter answered %s of 400 session-binds", fields[1])
			}
			if spent > 800_000 {
				t.Errorf("the launcher spent %d µs of CPU on 400 session-binds from one connection: more than 2 ms each, outside the session's cgroup", spent)
			}
			if r.Code != 0 {
				t.Errorf("the session failed:\n%s", r)
			}
		})
	}
}

// messageLoop waits for the test's go, then for two seconds asks the --ssh-agent
// filter for its key list on one connection, one request after another, and
// reports how many answers it read.
const messageLoop = `
import os, socket, struct, time
open("ready", "w").close()
for _ in range(3000):
    if os.path.exists("go"):
        break
    time.sleep(0.02)
c = socket.socket(socket.AF_UNIX)
c.connect(os.environ["SSH_AUTH_SOCK"])
f = c.makefile("rb")
answers = 0
end = time.monotonic() + 2
while time.monotonic() < end:
    c.sendall(b"\x00\x00\x00\x01\x0b")
    hdr = f.read(4)
    if len(hdr) < 4:
        break
    f.read(struct.unpack(">I", hdr)[0])
    answers += 1
with open("done.tmp", "w") as out:
    out.write("%d\n" % answers)
os.rename("done.tmp", "done")
`

// TestSSHAgentMessageLoop: pacing the filter's connections left what one
// connection sends unpaced, and each message cost the launcher, outside the
// session's cgroup, about five times the sandbox's CPU: a loop of key-list
// requests on one connection was answered as fast as it asked (thousands in two
// seconds). The filter answers at most 200 messages a second after a burst of 64.
func TestSSHAgentMessageLoop(t *testing.T) {
	needAgentTools(t)
	agentSock := startKeyedAgent(t)
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			fields, spent, r := runLoop(t, sandboxtest.NewBox(t, backend), []string{"--ssh-agent"}, []string{"SSH_AUTH_SOCK=" + agentSock}, messageLoop)
			if len(fields) != 1 {
				t.Fatalf("the loop's report: %q\n%s", fields, r)
			}
			answers, _ := strconv.Atoi(fields[0])
			t.Logf("%d key lists answered in 2 s on one connection; launcher: %d µs of CPU", answers, spent)
			if answers > 1000 {
				t.Errorf("the filter answered %d messages of one connection in 2 s: not paced", answers)
			}
			if answers < 64 {
				t.Errorf("the filter answered %d messages in 2 s, fewer than its burst", answers)
			}
			if r.Code != 0 {
				t.Errorf("the session failed:\n%s", r)
			}
		})
	}
}
