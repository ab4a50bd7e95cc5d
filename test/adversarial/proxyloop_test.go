package adversarial

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
)

// proxyRefusalLoop waits for the test's go, then for three seconds asks the
// --allow-net proxy for a host no rule lists, one request after another, each on
// a connection of its own whose answer it reads; then it fetches from an allowed
// host. It reports the answers it got to the loop and the fetch's body.
const proxyRefusalLoop = `
import os, socket, subprocess, time
open("ready", "w").close()
for _ in range(3000):
    if os.path.exists("go"):
        break
    time.sleep(0.02)
answered = 0
end = time.monotonic() + 3
while time.monotonic() < end:
    s = socket.create_connection(("127.0.0.1", 3128))
    s.settimeout(5)
    try:
        s.sendall(b"CONNECT refused.test:443 HTTP/1.1\r\n\r\n")
        if s.recv(200).startswith(b"HTTP/1.1 403"):
            answered += 1
    except OSError:
        pass
    s.close()
after = subprocess.run(["curl", "-sS", "--max-time", "30", os.environ["ALLOWED"]], capture_output=True, text=True)
with open("done.tmp", "w") as f:
    f.write("%d %s\n" % (answered, (after.stdout or after.stderr).strip()))
os.rename("done.tmp", "done")
`

// TestProxyRefusalLoop: each connection to the --allow-net proxy that ends
// without a tunnel (a refused host, here) cost the launcher, outside the
// session's cgroup, about three times the CPU time it cost the command: a loop of
// refused requests had the host spend a multiple of --cpus on top of the session
// (5,000 refusals: 0.27-0.43 s of the loop's CPU, 0.88-1.15 s of the launcher's).
// Such connections now free their slot at 100 a second after a burst, so in three
// seconds the loop gets at most about 64 + 256 + 300 answers, where it got
// thousands; an allowed request after it is served.
func TestProxyRefusalLoop(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "still-served") })}
	go srv.Serve(l)
	defer srv.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			fields, spent, r := runLoop(t, sandboxtest.NewBox(t, backend), []string{"--allow-net", "allowed.test", "--allow-net", "127.0.0.1:" + port},
				[]string{"ALLOWED=http://allowed.test:" + port + "/", "_AGENTBOX_TEST_HOSTS=allowed.test=127.0.0.1"}, proxyRefusalLoop)
			if len(fields) < 2 {
				t.Fatalf("the loop's report: %q\n%s", fields, r)
			}
			answered, _ := strconv.Atoi(fields[0])
			t.Logf("%d refusals answered in 3 s; the launcher spent %d µs of CPU over the loop and the fetch", answered, spent)
			if answered > 1000 {
				t.Errorf("the proxy answered %d refused requests in 3 s: not paced", answered)
			}
			if after := strings.Join(fields[1:], " "); after != "still-served" {
				t.Errorf("an allowed request after the loop got %q", after)
			}
			if r.Code != 0 {
				t.Errorf("the session failed:\n%s", r)
			}
		})
	}
}

// TestProxyLocalUseNAT64: RFC 8215's local-use NAT64 prefix (64:ff9b:1::/48)
// embeds an IPv4 address as the well-known one does, and a translator of the
// network (or of the host) dials that address: under `--allow-net ::/0` the
// proxy dialled 64:ff9b:1::a9fe:a9fe, the metadata service's address translated,
// where 64:ff9b::a9fe:a9fe was refused. Both are refused now, as the
// address they embed is without an address rule inside its range.
func TestProxyLocalUseNAT64(t *testing.T) {
	script := `for a in 64:ff9b::a9fe:a9fe 64:ff9b:1::a9fe:a9fe; do
exec 3<>/dev/tcp/127.0.0.1/3128; printf 'CONNECT [%s]:80 HTTP/1.1\r\n\r\n' $a >&3; head -1 <&3; exec 3>&-
done`
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			r := sandboxtest.Run(b.Command(b.Repo, []string{"--no-git-save", "--allow-net", "::/0"}, "exec /bin/bash -c '"+strings.ReplaceAll(script, "'", `'\''`)+"'"))
			lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
			if len(lines) != 2 {
				t.Fatalf("want two answers:\n%s", r)
			}
			for _, l := range lines {
				if !strings.HasPrefix(l, "HTTP/1.1 403 ") {
					t.Errorf("a NAT64 form of 169.254.169.254 under ::/0 was not refused: %q", l)
				}
			}
		})
	}
}
