package behaviour

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// --host-port and --publish (issue 34), against every backend and through the Go
// API's door, all on loopback: the servers on the host are the test's own, those
// inside are nc and python3 from the host's /usr/bin. (A launch with forwardings
// always runs the Go init, which creates their sockets: native-go is native here.)

// portRunners are the backends, and the native one through the Go API.
func portRunners(t *testing.T) []string { return append(backends(t), sandboxtest.GoAPI) }

// tcpServer serves every connection with serve on the host's 127.0.0.1 and returns
// its port.
func tcpServer(t *testing.T, serve func(net.Conn)) int {
	t.Helper()
	return tcpServerOn(t, "tcp4", "127.0.0.1:0", serve)
}

// tcpServerOn is tcpServer listening on addr of network.
func tcpServerOn(t *testing.T, network, addr string, serve func(net.Conn)) int {
	t.Helper()
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() { defer wg.Done(); defer c.Close(); serve(c) }()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().(*net.TCPAddr).Port
}

// greeter answers every connection with line.
func greeter(line string) func(net.Conn) {
	return func(c net.Conn) { fmt.Fprintf(c, "%s\n", line) }
}

// firehose writes to every connection until it is closed.
func firehose(c net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

// freePort is a port of the host's loopback nothing listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// portRecord is what agentbox show --json says of the last session's forwardings.
type portRecord struct {
	Policy struct {
		HostPorts []string `json:"host_ports"`
		Publish   []string `json:"publish"`
	} `json:"policy"`
	Ports []struct {
		Kind        string `json:"kind"`
		Inside      int    `json:"inside"`
		Host        int    `json:"host"`
		Connections int    `json:"connections"`
		Refused     int    `json:"refused"`
		Failed      int    `json:"failed"`
	} `json:"ports"`
}

func lastPorts(t *testing.T, b *box) portRecord {
	t.Helper()
	show := run(b.fixture().Agentbox(b.repo, "show", "--json"))
	var rec portRecord
	if err := json.Unmarshal([]byte(show.stdout), &rec); err != nil {
		t.Fatalf("agentbox show --json: %v\n%s", err, show)
	}
	return rec
}

// Inside, 127.0.0.1:PORT reaches the host's forwarded port and nothing else of its
// loopback: neither another server there nor the forwarded one at its own number.
// With --offline and beside --allow-net's proxy, whose listener travels with them.
func TestHostPort(t *testing.T) {
	forwarded := tcpServer(t, greeter("hello from the host"))
	other := tcpServer(t, greeter("not forwarded"))
	for _, backend := range portRunners(t) {
		for _, net := range [][]string{{"--offline"}, {"--allow-net", "127.0.0.1:1"}} {
			if backend == sandboxtest.GoAPI && net[0] != "--offline" {
				continue // the Go API has no --allow-net
			}
			t.Run(backend+net[0], func(t *testing.T) {
				b := newBox(t, backend)
				args := append([]string{"--no-git-save", "--host-port", fmt.Sprintf("15432:%d", forwarded)}, net...)
				// No socket of the launcher's or the init's reaches the command.
				r := b.sh(fmt.Sprintf(`
echo "forwarded=$(nc.openbsd -N -w 5 127.0.0.1 15432 </dev/null)"
nc.openbsd -z -w 2 127.0.0.1 %d; echo "other=$?"
nc.openbsd -z -w 2 127.0.0.1 %d; echo "direct=$?"
echo "sockets=$(for f in /proc/self/fd/*; do readlink "$f"; done | grep -c socket)"
`, other, forwarded), args...)
				for _, want := range []string{"forwarded=hello from the host\n", "other=1\n", "direct=1\n", "sockets=0\n"} {
					if r.code != 0 || !strings.Contains(r.stdout, want) {
						t.Errorf("lacks %q:\n%s", want, r)
					}
				}
				rec := lastPorts(t, b)
				want := fmt.Sprintf("15432:%d", forwarded)
				if len(rec.Policy.HostPorts) != 1 || rec.Policy.HostPorts[0] != want || len(rec.Ports) != 1 ||
					rec.Ports[0].Kind != "host-port" || rec.Ports[0].Inside != 15432 || rec.Ports[0].Host != forwarded || rec.Ports[0].Connections != 1 {
					t.Errorf("record: %+v", rec)
				}
				show := run(b.fixture().Agentbox(b.repo, "show"))
				if !strings.Contains(show.stdout, fmt.Sprintf("127.0.0.1:15432 inside -> host 127.0.0.1:%d: 1 connection", forwarded)) {
					t.Errorf("agentbox show lacks the forwarding:\n%s", show)
				}
			})
		}
	}
}

// fetch connects to the host's 127.0.0.1:port, sends a request and returns all it
// reads; "" when it could not connect.
func fetch(port int) string { return fetchAt("tcp4", fmt.Sprintf("127.0.0.1:%d", port)) }

// fetchAt is fetch from addr of network.
func fetchAt(network, addr string) string {
	c, err := net.DialTimeout(network, addr, 2*time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.0\r\n\r\n")
	b, _ := io.ReadAll(c)
	return string(b)
}

// A page the command serves on 127.0.0.1:8080 inside is fetched from the host's
// 127.0.0.1:HOSTPORT; after the session nothing listens there.
func TestPublish(t *testing.T) {
	for _, backend := range portRunners(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			port := freePort(t)
			got := make(chan string, 1)
			go func() {
				var page string
				waitFor(func() bool { page = fetch(port); return strings.Contains(page, "page from inside") })
				got <- page
			}()
			r := b.sh(`printf 'HTTP/1.0 200 OK\r\n\r\npage from inside\n' | nc.openbsd -N -l 127.0.0.1 8080 >/dev/null; echo served`,
				"--no-git-save", "--offline", "--publish", fmt.Sprintf("8080:%d", port))
			if r.code != 0 || !strings.Contains(r.stdout, "served") {
				t.Fatalf("session failed:\n%s", r)
			}
			if page := <-got; !strings.Contains(page, "page from inside") {
				t.Errorf("the host fetched %q", page)
			}
			if c, err := net.DialTimeout("tcp4", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
				c.Close()
				t.Errorf("127.0.0.1:%d still accepts after the session", port)
			}
			rec := lastPorts(t, b)
			if len(rec.Ports) != 1 || rec.Ports[0].Kind != "publish" || rec.Ports[0].Inside != 8080 || rec.Ports[0].Host != port || rec.Ports[0].Connections < 1 {
				t.Errorf("record: %+v", rec)
			}
		})
	}
}

// Bad values, a host port in use and forwardings without a network namespace of
// the sandbox's own stop agentbox before the command, with exit 125 and one line.
func TestPortsRefused(t *testing.T) {
	b := newBox(t, "native")
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	busy := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--offline", "--host-port", "0"}, "out of range"},
		{[]string{"--offline", "--host-port", "65536"}, "out of range"},
		{[]string{"--offline", "--host-port", "5432:99999"}, "out of range"},
		{[]string{"--offline", "--host-port", "pg"}, "want PORT[:HOSTPORT]"},
		{[]string{"--offline", "--host-port", "5432:"}, "a port is missing"},
		{[]string{"--offline", "--host-port", "-1"}, "want PORT[:HOSTPORT]"},
		{[]string{"--offline", "--publish", "80:8080:1"}, "want PORT[:HOSTPORT]"},
		{[]string{"--offline", "--host-port", "5432", "--host-port", "5432"}, "given twice"},
		{[]string{"--offline", "--host-port", "5432:1", "--host-port", "5432:2"}, "port 5432 inside is taken"},
		{[]string{"--offline", "--publish", "8080:9000", "--publish", "8081:9000"}, "host port 9000 is taken"},
		{[]string{"--offline", "--host-port", "8080", "--publish", "8080:9000"}, "port 8080 inside is taken"},
		{[]string{"--allow-net", "example.com", "--host-port", "3128"}, "--allow-net proxy"},
		{[]string{"--host-port", "5432"}, "shares the host's network"},
		{[]string{"--publish", "8080"}, "shares the host's network"},
		{[]string{"--offline", "--publish", "8080:" + busy}, "is in use"},
	} {
		r := b.sh("echo ran", append([]string{"--no-git-save"}, c.args...)...)
		if r.code != 125 || strings.Contains(r.stdout, "ran") || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%v: want exit 125 and one line with %q:\n%s", c.args, c.want, r)
		}
	}
}

// hog is a python3 client that opens n connections to 127.0.0.1:port, never reads
// from them, waits until the launcher has relayed or refused each, and holds them
// for secs seconds.
const hog = `import selectors, socket, sys, time
port, n, secs = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
held = []
for _ in range(n):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        s.connect(("127.0.0.1", port))
        held.append(s)
    except OSError:
        s.close()
# Each connection is readable once the launcher has dealt with it: relayed (the
# far end's data) or refused (closed). Both are counted by then.
sel = selectors.DefaultSelector()
for s in held:
    sel.register(s, selectors.EVENT_READ)
waiting, deadline = len(held), time.monotonic() + 120
while waiting and time.monotonic() < deadline:
    for key, _ in sel.select(1):
        sel.unregister(key.fileobj)
        waiting -= 1
print("hogging", len(held), "unanswered", waiting, flush=True)
time.sleep(secs)
`

// Hostile traffic through the relays — more connections than the launcher relays
// at a time, each with a server writing as fast as it can to a client that never
// reads — costs the flooded forwarding only: another forwarding still answers at
// once, and the session ends when its command does.
func TestPortsHostile(t *testing.T) {
	hose := tcpServer(t, firehose)
	hello := tcpServer(t, greeter("still answering"))
	for _, backend := range backends(t) {
		t.Run(backend+"/host-port", func(t *testing.T) {
			b := newBox(t, backend)
			writeFile(t, b.repo+"/hog.py", hog)
			start := time.Now()
			// The second forwarding is asked once the hog holds its connections
			// (it says so), however long that takes on a loaded machine. The hog
			// would hold them for 300 s: a session that waited for it would end far
			// beyond the bound below.
			r := b.sh(`/usr/bin/python3 hog.py 15001 300 300 > hog.out & i=0
while ! grep -q hogging hog.out && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done
echo "answer=$(nc.openbsd -N -w 5 127.0.0.1 15002 </dev/null)"`,
				"--no-git-save", "--offline", "--host-port", fmt.Sprintf("15001:%d", hose), "--host-port", fmt.Sprintf("15002:%d", hello))
			if r.code != 0 || !strings.Contains(r.stdout, "answer=still answering\n") {
				t.Errorf("the second forwarding did not answer:\n%s", r)
			}
			if d := time.Since(start); d > 2*time.Minute {
				t.Errorf("the session took %v to end", d)
			}
			rec := lastPorts(t, b)
			if len(rec.Ports) != 2 || rec.Ports[0].Connections+rec.Ports[0].Refused < 300 || rec.Ports[0].Refused == 0 {
				t.Errorf("record: %+v", rec)
			}
		})
		t.Run(backend+"/publish", func(t *testing.T) {
			b := newBox(t, backend)
			hosePort, pagePort := freePort(t), freePort(t)
			// Inside: a server writing to every client, and a page.
			writeFile(t, b.repo+"/hose.py", `import socket, threading
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", 8080)); l.listen(512)
def pour(c):
    try:
        while True: c.sendall(b"x" * 65536)
    except OSError: pass
while True:
    c, _ = l.accept(); threading.Thread(target=pour, args=(c,), daemon=True).start()
`)
			done := make(chan result, 1)
			cmd := b.command(b.repo, []string{"--no-git-save", "--offline", "--publish", fmt.Sprintf("8080:%d", hosePort), "--publish", fmt.Sprintf("8081:%d", pagePort)},
				`/usr/bin/python3 hose.py & printf 'HTTP/1.0 200 OK\r\n\r\npage from inside\n' | nc.openbsd -N -l 127.0.0.1 8081 >/dev/null; echo served`)
			if err := startAndCollect(cmd, done); err != nil {
				t.Fatal(err)
			}
			// The host floods the first port and never reads.
			if !waitFor(func() bool { return strings.HasPrefix(fetchSome(hosePort), "xxxx") }) {
				t.Fatal("the pouring server inside never answered")
			}
			var held []net.Conn
			defer func() {
				for _, c := range held {
					c.Close()
				}
			}()
			for range 300 {
				c, err := net.DialTimeout("tcp4", fmt.Sprintf("127.0.0.1:%d", hosePort), time.Second)
				if err == nil {
					c.(*net.TCPConn).SetReadBuffer(4096)
					held = append(held, c)
				}
			}
			var page string
			waitFor(func() bool { page = fetch(pagePort); return strings.Contains(page, "page from inside") })
			if !strings.Contains(page, "page from inside") {
				t.Errorf("the second forwarding did not answer: %q", page)
			}
			select {
			case r := <-done:
				if r.code != 0 || !strings.Contains(r.stdout, "served") {
					t.Errorf("session:\n%s", r)
				}
			case <-time.After(2 * time.Minute): // a bound against a hang
				t.Fatal("the session did not end")
			}
			// The flooded port went with the session.
			if c, err := net.DialTimeout("tcp4", fmt.Sprintf("127.0.0.1:%d", hosePort), time.Second); err == nil {
				c.Close()
				t.Errorf("127.0.0.1:%d still accepts after the session", hosePort)
			}
		})
	}
}

// fetchSome returns the first bytes 127.0.0.1:port sends, "" when none came.
func fetchSome(port int) string {
	c, err := net.DialTimeout("tcp4", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 4)
	n, _ := io.ReadFull(c, buf)
	return string(buf[:n])
}

// Git over SSH to a host's sshd through --host-port, signed by the --ssh-agent
// filter, through every door (the Go API's options too): the two services of issue
// 34 together, as a user of an --offline session reaches a Git server on the host.
func TestSSHOverHostPort(t *testing.T) {
	s := startSSH(t)
	knownHost(t, s.hostPub)
	for _, backend := range portRunners(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			url := fmt.Sprintf("ssh://%s@127.0.0.1:%s%s", testenv.TestUser(t).Name, s.port, s.bare)
			push := func(key string) result {
				cmd := b.command(b.repo, []string{"--no-git-save", "--offline", "--host-port", s.port, "--ssh-key", key, "--allow-git-push"},
					`ssh-add -l; git commit -q --allow-empty -m one && GIT_SSH_VARIANT=ssh git push -q "$URL" HEAD:refs/heads/hp-`+backend+` 2>&1`)
				cmd.Env = append(cmd.Env, "SSH_AUTH_SOCK="+s.agent, "URL="+url)
				return run(cmd)
			}
			if r := push("key2"); r.code == 0 || !strings.Contains(r.stdout, "key2") || strings.Contains(r.stdout, "key1") {
				t.Fatalf("git push signed with key2 (not authorized) succeeded, or the agent listed key1:\n%s", r)
			}
			if r := push("key1"); r.code != 0 || !strings.Contains(r.stdout, "key1") {
				t.Fatalf("git push over ssh through --host-port %s with --ssh-key key1:\n%s", s.port, r)
			}
			out, err := testenv.Command(t, s.dir, "git", "--git-dir", s.bare, "rev-parse", "refs/heads/hp-"+backend).CombinedOutput()
			if err != nil {
				t.Fatalf("pushed branch missing: %v %s", err, out)
			}
			show := run(b.fixture().Agentbox(b.repo, "show"))
			if !strings.Contains(show.stdout, s.fp1) || !strings.Contains(show.stdout, "host-port") {
				t.Errorf("agentbox show lacks the signature or the forwarding:\n%s", show)
			}
		})
	}
}

// A repository's .agentbox.toml, which the sandbox can write, may drop the user's
// forwardings but never add one: an entry not in the user's list is dropped.
func TestRepoFilePorts(t *testing.T) {
	hello := tcpServer(t, greeter("hello from the host"))
	b := newBox(t, "native")
	repoFile := b.repo + "/.agentbox.toml"
	args := []string{"--offline", "--host-port", fmt.Sprintf("15432:%d", hello)}
	for _, c := range []struct{ file, want string }{
		{"", "hello from the host"},
		{"host-port = []\n", ""},
		{fmt.Sprintf("host-port = [\"15432:%d\"]\n", hello), "hello from the host"},
		{"host-port = [\"15432:22\"]\n", ""},
		{"publish = [\"8080\"]\n", "hello from the host"},
	} {
		writeFile(t, repoFile, c.file)
		testenv.Chown(t, repoFile)
		r := b.sh(`echo "got=$(nc.openbsd -N -w 3 127.0.0.1 15432 </dev/null)"`, args...)
		if r.code != 0 || !strings.Contains(r.stdout, "got="+c.want+"\n") {
			t.Errorf("%q: want got=%s, got %s", c.file, c.want, r)
		}
		if rec := lastPorts(t, b); len(rec.Policy.Publish) != 0 || len(rec.Policy.HostPorts) > 1 ||
			len(rec.Policy.HostPorts) == 1 && rec.Policy.HostPorts[0] != fmt.Sprintf("15432:%d", hello) {
			t.Errorf("%q: the session's forwardings: %+v", c.file, rec.Policy)
		}
	}
}
