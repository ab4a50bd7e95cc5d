package behaviour

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// fetch6 is fetch on the host's [::1]:port.
func fetch6(port int) string { return fetchAt("tcp6", fmt.Sprintf("[::1]:%d", port)) }

// needIPv6Loopback skips where the host has no ::1 (nobody can listen there).
func needIPv6Loopback(t *testing.T) {
	l, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		testenv.Skip(t, "no IPv6 loopback on this host (%v): nobody can listen on ::1", err)
	}
	l.Close()
}

// TestPublishHoldsIPv6Loopback: --publish listened on the host's 127.0.0.1:HOSTPORT
// only, so another user (here root, the launcher being the test user) could listen
// on [::1]:HOSTPORT meanwhile, where a browser's localhost:HOSTPORT goes first, and
// serve the operator its own page in the sandbox's name. The launcher holds
// [::1]:HOSTPORT too and relays it to the same port inside; a [::1]:HOSTPORT already
// taken at launch stops it with 125 and one line.
func TestPublishHoldsIPv6Loopback(t *testing.T) {
	needIPv6Loopback(t)
	for _, backend := range portRunners(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			port := freePort(t)
			squat := make(chan error, 1)
			got := make(chan string, 1)
			go func() {
				var page string
				waitFor(func() bool { page = fetch(port); return strings.Contains(page, "page from inside") })
				// The session is serving: another user's server at [::1]:PORT, or at
				// [::]:PORT for IPv6 only, must find the port taken.
				var errs []error
				for _, addr := range []string{"[::1]", "[::]"} {
					l, err := net.Listen("tcp6", fmt.Sprintf("%s:%d", addr, port))
					if err == nil {
						l.Close()
						errs = append(errs, fmt.Errorf("%s:%d was free for another user", addr, port))
					} else if !errors.Is(err, syscall.EADDRINUSE) {
						errs = append(errs, err)
					}
				}
				squat <- errors.Join(errs...)
				page = ""
				if len(errs) > 0 || !waitFor(func() bool { page = fetch6(port); return strings.Contains(page, "page from inside") }) {
					// The session serves twice: end it.
					waitFor(func() bool { return strings.Contains(fetch(port), "page from inside") })
				}
				got <- page
			}()
			r := b.sh(`for i in 1 2; do printf 'HTTP/1.0 200 OK\r\n\r\npage from inside\n' | nc.openbsd -N -l 127.0.0.1 8080 >/dev/null; done; echo served`,
				"--no-git-save", "--offline", "--publish", fmt.Sprintf("8080:%d", port))
			if r.code != 0 || !strings.Contains(r.stdout, "served") {
				t.Fatalf("session failed:\n%s", r)
			}
			if err := <-squat; err != nil {
				t.Errorf("while the session published %d: %v", port, err)
			}
			if page := <-got; !strings.Contains(page, "page from inside") {
				t.Errorf("the host fetched %q from [::1]:%d", page, port)
			}
		})
	}
	// Taken before the launch: refused, as 127.0.0.1 in use is.
	b := newBox(t, "native")
	l, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	busy := l.Addr().(*net.TCPAddr).Port
	r := b.sh("echo ran", "--no-git-save", "--offline", "--publish", fmt.Sprintf("8080:%d", busy))
	if r.code != 125 || strings.Contains(r.stdout, "ran") || !strings.Contains(r.stderr, fmt.Sprintf("[::1]:%d is in use", busy)) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Errorf("--publish with [::1]:%d taken: want exit 125 and one line:\n%s", busy, r)
	}
}

// TestHostPortReachesIPv6Loopback: a host server of localhost listening on [::1]
// only (Node's since 18) was out of --host-port's reach, which dialled 127.0.0.1
// alone; refused there, the relay dials [::1] at the same port.
func TestHostPortReachesIPv6Loopback(t *testing.T) {
	needIPv6Loopback(t)
	forwarded := tcpServerOn(t, "tcp6", "[::1]:0", greeter("hello from ::1"))
	for _, backend := range portRunners(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			r := b.sh(`echo "forwarded=$(nc.openbsd -N -w 5 127.0.0.1 15433 </dev/null)"`,
				"--no-git-save", "--offline", "--host-port", fmt.Sprintf("15433:%d", forwarded))
			if r.code != 0 || !strings.Contains(r.stdout, "forwarded=hello from ::1\n") {
				t.Errorf("the host's [::1]:%d through 127.0.0.1:15433 inside:\n%s", forwarded, r)
			}
			if rec := lastPorts(t, b); len(rec.Ports) != 1 || rec.Ports[0].Connections != 1 || rec.Ports[0].Failed != 0 {
				t.Errorf("record: %+v", rec)
			}
		})
	}
}

// ownServerScript is the test user's own server of localhost, on [::1]:PORT only: it
// prints "ready" once it listens and answers every connection with "hello from
// mine".
const ownServerScript = `
import os, socket
s = socket.socket(socket.AF_INET6)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the last row's connections wait in TIME_WAIT
s.bind(("::1", int(os.environ["PORT"])))
s.listen()
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.sendall(b"hello from mine\n")
    c.close()
`

// TestHostPortPrefersOwnServer: another local user (root here) listening on
// 127.0.0.1:PORT got --host-port's connections before the launching user's own
// server on [::1]:PORT, and with them what the session sent to that server. The
// relay now dials the user's own first; the other user's is still reached when it
// is the only one (a system service).
func TestHostPortPrefersOwnServer(t *testing.T) {
	needIPv6Loopback(t)
	if os.Getuid() != 0 {
		testenv.Skip(t, "needs root, to own the other user's server")
	}
	port := tcpServerOn(t, "tcp4", "127.0.0.1:0", greeter("hello from another user"))
	for _, backend := range portRunners(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			own := testenv.Command(t, b.home, "/usr/bin/python3", "-c", ownServerScript)
			own.Env = append(own.Env, fmt.Sprintf("PORT=%d", port))
			out, err := own.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := own.Start(); err != nil {
				t.Fatal(err)
			}
			stopped := false
			stop := func() {
				if !stopped {
					stopped = true
					own.Process.Kill()
					own.Wait()
				}
			}
			defer stop()
			if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
				t.Fatalf("the user's own server on [::1]:%d: %q, %v", port, line, err)
			}
			script := `echo "forwarded=$(nc.openbsd -N -w 5 127.0.0.1 15434 </dev/null)"`
			args := []string{"--no-git-save", "--offline", "--host-port", fmt.Sprintf("15434:%d", port)}
			if r := b.sh(script, args...); r.code != 0 || !strings.Contains(r.stdout, "forwarded=hello from mine\n") {
				t.Errorf("root on 127.0.0.1:%d, the user's own server on [::1]: want the user's own:\n%s", port, r)
			}
			stop()
			if r := b.sh(script, args...); r.code != 0 || !strings.Contains(r.stdout, "forwarded=hello from another user\n") {
				t.Errorf("root's server the only one on %d: want it reached:\n%s", port, r)
			}
		})
	}
}
