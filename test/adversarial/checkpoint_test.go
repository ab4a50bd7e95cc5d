package adversarial

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// hostileCheckpointClient is what a hostile sandbox sends the checkpoint endpoint:
// a message past the bound, and one far past it; a message made of path tricks,
// control characters and a NUL; a flood of 64 clients sending 5 requests each; a
// connection that never sends; then one ordinary request, which must still work.
const hostileCheckpointClient = `
import os, socket, threading, time
p = os.environ["AGENTBOX_CHECKPOINT"]
def req(data):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(120)
    try:
        s.connect(p)
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        return s.makefile("rb").readline().decode(errors="replace").strip()
    except OSError as e:
        return "oserror " + type(e).__name__
    finally:
        s.close()
print("huge:", req(b"x" * 8192), flush=True)
t0 = time.time()
print("vast:", req(b"x" * (64 << 20)), round(time.time() - t0), flush=True)
time.sleep(0.6)
tok = os.environ["TOKEN"].encode()
print("tricks:", req(b"../../../../../tmp/agentbox-ckpt-escape-" + tok + b" \x00 \x1b[2J\x1b]0;pwned\x07\r\nline2 $(touch /tmp/agentbox-ckpt-x-" + tok + b") \xff\xfe"), flush=True)
time.sleep(0.6)
results = []
def flood():
    for i in range(5):
        results.append(req(b"flood"))
t0 = time.time()
ts = [threading.Thread(target=flood) for _ in range(64)]
[t.start() for t in ts]
[t.join() for t in ts]
print("flood ok:", sum(1 for r in results if r.startswith("ok ")), "of", len(results), "in", round(time.time() - t0, 2), flush=True)
s = socket.socket(socket.AF_UNIX)
s.connect(p)
s.settimeout(30)
print("held:", s.makefile("rb").readline().decode().strip(), flush=True)
time.sleep(0.6)
print("after:", req(b"after"), flush=True)
`

// TestCheckpointEndpointAttacked: what a sandbox sends the checkpoint endpoint
// makes the host do bounded work, on every backend: oversized messages are refused
// unread, a flood is served one checkpoint at a time at the minimum interval, a
// connection that sends nothing is dropped, a message is text only (nothing is
// made where it points) and is shown terminal-safe.
func TestCheckpointEndpointAttacked(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.Skip(t, "python3 missing")
	}
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			// The paths the message names are this test's own: a fixed name in the
			// machine's /tmp could be there from an earlier run or another program.
			token := filepath.Base(b.Home)
			made := []string{"/tmp/agentbox-ckpt-x-" + token, "/tmp/agentbox-ckpt-escape-" + token, filepath.Join(b.Home, "tmp")}
			cmd := b.Command(b.Repo, nil, `python3 -c "$SCRIPT"`)
			cmd.Env = append(cmd.Env, "SCRIPT="+hostileCheckpointClient, "TOKEN="+token)
			start := time.Now()
			r := sandboxtest.Run(cmd)
			took := time.Since(start)
			if r.Code != 0 || took > 120*time.Second {
				t.Fatalf("exit %d after %s:\n%s", r.Code, took, r)
			}
			out := r.Stdout
			for _, want := range []string{"huge: refused: the message is longer than 4096 bytes", "held: refused: the request did not arrive whole", "after: ok "} {
				if !strings.Contains(out, want) {
					t.Errorf("want %q in:\n%s", want, out)
				}
			}
			if m := regexp.MustCompile(`vast: (.*) (\d+)\n`).FindStringSubmatch(out); m == nil || strings.HasPrefix(m[1], "ok") {
				t.Errorf("a 64 MiB message was not refused:\n%s", out)
			} else if secs, _ := strconv.Atoi(m[2]); secs > 10 {
				t.Errorf("refusing a 64 MiB message took %d s", secs)
			}
			m := regexp.MustCompile(`flood ok: (\d+) of 320 in ([0-9.]+)`).FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("no flood result:\n%s", out)
			}
			ok, _ := strconv.Atoi(m[1])
			secs, _ := strconv.ParseFloat(m[2], 64)
			// One at a time, at least 250 ms apart.
			if ok > 1+int(secs/0.25) {
				t.Errorf("%d of 320 flood requests were taken in %.2f s: more than one per 250 ms", ok, secs)
			}
			for _, p := range made {
				if sandboxtest.Exists(p) {
					os.RemoveAll(p)
					t.Errorf("a checkpoint message was run or made a path: %s", p)
				}
			}
			tricks := regexp.MustCompile(`tricks: ok (\d+)`).FindStringSubmatch(out)
			if tricks == nil {
				t.Fatalf("the message with path tricks was not taken as text:\n%s", out)
			}
			id := lastID(t, b)
			show := sandboxtest.Run(b.Agentbox(b.Repo, "show", id+"@"+tricks[1]))
			if show.Code != 0 || !strings.Contains(show.Stdout, "../../../../../tmp/agentbox-ckpt-escape-"+token) || strings.ContainsAny(show.Stdout, "\x00\x1b\x07\r") {
				t.Fatalf("show of the tricky step: %q", show.Stdout)
			}
			log := sandboxtest.Run(b.Agentbox(b.Repo, "log"))
			if strings.ContainsAny(log.Stdout, "\x00\x1b\x07\r") || strings.Count(log.Stdout, "\n  @") != ok+2 {
				t.Fatalf("log lists %d steps, want %d, terminal-safe:\n%q", strings.Count(log.Stdout, "\n  @"), ok+2, log.Stdout)
			}
		})
	}
}

// lastID is the id of the box's repository's newest record.
func lastID(t *testing.T, b *sandboxtest.Box) string {
	t.Helper()
	r := sandboxtest.Run(b.Agentbox(b.Repo, "log"))
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if r.Code != 0 || len(lines) < 2 {
		t.Fatalf("agentbox log: %s", r)
	}
	return strings.Fields(lines[1])[0]
}

// listenerPath is the path of the Unix socket process pid listens on below
// /tmp/agentbox-checkpoint-*, "" when none: its descriptors' inodes, looked up in
// /proc/net/unix.
func listenerPath(pid int) string {
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	inodes := map[string]bool{}
	for _, fd := range fds {
		l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if ino, ok := strings.CutPrefix(l, "socket:["); ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/net/unix", pid))
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) == 8 && inodes[fl[6]] && strings.HasPrefix(fl[7], "/tmp/agentbox-checkpoint-") {
			return fl[7]
		}
	}
	return ""
}

// TestCheckpointEndpointIsTheSessionsOwn: a second sandbox cannot reach the first
// one's endpoint (it lives below the host's /tmp, which no sandbox sees), its own
// checkpoints land in its own record, and once the first session ended its
// endpoint is gone.
func TestCheckpointEndpointIsTheSessionsOwn(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.Skip(t, "python3 missing")
	}
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			a, b := sandboxtest.NewBox(t, backend), sandboxtest.NewBox(t, backend)
			first := a.Command(a.Repo, nil, `while [ ! -e stop ]; do sleep 0.1; done; "$AB" checkpoint first-own`)
			first.Env = append(first.Env, "AB="+a.Bin)
			res := make(chan sandboxtest.Result, 1)
			if err := sandboxtest.StartAndCollect(first, res); err != nil {
				t.Fatal(err)
			}
			var sock string
			if !sandboxtest.WaitFor(func() bool { sock = listenerPath(first.Process.Pid); return sock != "" }) {
				os.WriteFile(filepath.Join(a.Repo, "stop"), nil, 0o644)
				t.Fatalf("no checkpoint endpoint found for the first session: %s", <-res)
			}
			second := b.Command(b.Repo, nil, `ls -A /tmp | wc -l
python3 -c 'import os, socket
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(os.environ["FIRST"]); print("REACHED")
except OSError as e:
    print("unreachable", type(e).__name__)'
"$AB" checkpoint second-own`)
			second.Env = append(second.Env, "AB="+b.Bin, "FIRST="+sock)
			r2 := sandboxtest.Run(second)
			sandboxtest.WriteFile(t, filepath.Join(a.Repo, "stop"), "")
			r1 := <-res
			if r2.Code != 0 || strings.Contains(r2.Stdout, "REACHED") || !strings.HasPrefix(r2.Stdout, "0\nunreachable") || !strings.Contains(r2.Stderr, "checkpoint: step 1 ") {
				t.Fatalf("second sandbox: %s", r2)
			}
			if r1.Code != 0 || !strings.Contains(r1.Stderr, "checkpoint: step 1 ") {
				t.Fatalf("first session: %s", r1)
			}
			for _, x := range []struct {
				box  *sandboxtest.Box
				want string
			}{{a, "first-own"}, {b, "second-own"}} {
				log := sandboxtest.Run(x.box.Agentbox(x.box.Repo, "log")).Stdout
				if strings.Count(log, "\n  @") != 1 || !strings.Contains(log, x.want) {
					t.Errorf("log of %s:\n%s", x.want, log)
				}
			}
			if _, err := os.Stat(filepath.Dir(sock)); err == nil {
				t.Errorf("the endpoint's directory %s outlived its session", filepath.Dir(sock))
			}
			if c, err := net.Dial("unix", sock); err == nil {
				c.Close()
				t.Errorf("the endpoint %s answers after its session ended", sock)
			}
		})
	}
}
