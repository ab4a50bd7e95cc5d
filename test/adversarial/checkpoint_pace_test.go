package adversarial

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// connectLoop waits for the test's go, then connects to the checkpoint endpoint
// 50,000 times without waiting; on a connection that was queued it sends a
// request past the size bound (refused unread, so that no checkpoint's own work,
// bounded apart, mixes in) and closes it. Then it asks for one checkpoint until it
// gets an answer, and reports the CPU time the loop took in this process, in
// microseconds.
const connectLoop = `
import os, resource, socket, time
p = os.environ["AGENTBOX_CHECKPOINT"]
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
def ask():
    for _ in range(600):
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(p)
            s.sendall(b"after the loop")
            s.shutdown(socket.SHUT_WR)
            a = s.makefile("rb").readline().decode().strip()
        except OSError:
            a = ""
        finally:
            s.close()
        if a:
            return a
        time.sleep(0.1)
    return "none"
answer = ask()
cpu = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * 1e6
with open("done.tmp", "w") as f:
    f.write("%d %d %s\n" % (cpu, queued, answer))
os.rename("done.tmp", "done")
`

// TestCheckpointEndpointConnectLoop: the launcher serves the checkpoint endpoint
// outside the session's cgroup, so what it spends there is outside --cpus. Each
// connection cost the launcher (accept, a goroutine, a read, an answer, a close)
// about twice what connect(2) cost the sandbox: a connect loop inside made the
// host spend twice the session's CPU limit on top of it, for as long as it ran.
// The endpoint accepts from a short backlog at a fixed pace, so the loop gets
// EAGAIN and the launcher's CPU time stays a small part of the loop's; a request
// after the loop is still answered. Every runner.
func TestCheckpointEndpointConnectLoop(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.Skip(t, "python3 missing")
	}
	for _, runner := range everyRunner(t) {
		t.Run(runner, func(t *testing.T) {
			b := sandboxtest.NewBox(t, runner)
			cmd := b.Command(b.Repo, []string{"--no-git-save"}, `python3 -c "$SCRIPT"`)
			cmd.Env = append(cmd.Env, "SCRIPT="+connectLoop)
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
			fields := strings.Fields(sandboxtest.ReadFile(t, filepath.Join(b.Repo, "done")))
			if len(fields) < 3 {
				t.Fatalf("the loop's report: %q\n%s", fields, r)
			}
			loop, _ := strconv.ParseInt(fields[0], 10, 64)
			t.Logf("loop: %d µs of CPU, %s connections queued; launcher: %d µs; the request after: %s", loop, fields[1], spent, strings.Join(fields[2:], " "))
			if fields[2] != "ok" && fields[2] != "refused:" {
				t.Errorf("the request after the loop got no answer: %q", strings.Join(fields[2:], " "))
			}
			if spent*4 > loop {
				t.Errorf("the launcher spent %d µs of CPU serving a connect loop that took the sandbox %d µs: more than a quarter, outside the session's cgroup", spent, loop)
			}
			if r.Code != 0 {
				t.Errorf("the session failed:\n%s", r)
			}
		})
	}
}

// processCPU is the CPU time (user and system, every thread) pid has used, in
// microseconds.
func processCPU(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name, which may hold spaces: state is the first.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return (utime + stime) * 1e6 / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on every Linux ABI Go
// builds for.
const clockTicks = 100
