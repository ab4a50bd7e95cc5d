package behaviour

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// The latency --host-port and --publish add per connection: one connection with a
// one-byte exchange, direct on loopback and through the launcher's relay, back to
// back in each iteration (so that a loaded machine slows both alike), with the same
// echo server (python3) at both ends. They report the medians of each and of the
// per-iteration ratio; docs/network.md has the figures.
//
//	go test ./test/behaviour -run '^$' -bench PortLatency -benchtime 2000x -count 3

// echoPy serves one-byte echoes one connection at a time ("serve PORT"), or
// measures DIRECT and VIA alternately N times and prints the medians ("client
// DIRECT VIA N": direct-ns via-ns ratio).
const echoPy = `import socket, statistics, sys, time
def serve(port):
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("127.0.0.1", port)); l.listen(128)
    print("listening", flush=True)
    while True:
        c, _ = l.accept()
        try:
            d = c.recv(1)
            if d: c.sendall(d)
        except OSError: pass
        finally: c.close()
def once(port):
    t = time.perf_counter_ns()
    c = socket.create_connection(("127.0.0.1", port)); c.sendall(b"x")
    if c.recv(1) != b"x": raise SystemExit("no echo")
    c.close()
    return time.perf_counter_ns() - t
def client(direct, via, n):
    d, v, r = [], [], []
    for _ in range(n):
        a = once(direct); b = once(via); d.append(a); v.append(b); r.append(b / a)
    print(int(statistics.median(d)), int(statistics.median(v)), statistics.median(r))
if sys.argv[1] == "serve": serve(int(sys.argv[2]))
else: client(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
`

// hostEcho starts echoPy's server on a free port of the host's loopback.
func hostEcho(b *testing.B, script string) int {
	port := freePortB(b)
	cmd := exec.Command("/usr/bin/python3", script, "serve", strconv.Itoa(port))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if !waitFor(func() bool { return echoOnce(port) == nil }) {
		b.Fatal("the host's echo server did not start")
	}
	return port
}

func freePortB(b *testing.B) int {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// echoOnce makes one connection to 127.0.0.1:port and exchanges one byte.
func echoOnce(port int) error {
	c, err := net.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write([]byte{'x'}); err != nil {
		return err
	}
	var buf [1]byte
	if _, err := c.Read(buf[:]); err != nil {
		return err
	}
	return nil
}

func portBenchBox(b *testing.B) (*box, string) {
	x := benchBox(b)
	script := filepath.Join(x.home, "echo.py")
	if err := os.WriteFile(script, []byte(echoPy), 0o644); err != nil {
		b.Fatal(err)
	}
	return x, script
}

// BenchmarkPortLatency/publish: a client on the host, direct to an echo server on
// the host's loopback and through --publish to the same server inside.
func BenchmarkPortLatency(b *testing.B) {
	b.Run("publish", func(b *testing.B) {
		x, script := portBenchBox(b)
		direct, pub := hostEcho(b, script), freePortB(b)
		cmd := testenv.Command(b, x.home, x.bin, "exec", "--no-git-save", "--no-record", "--offline", "--publish", fmt.Sprintf("8080:%d", pub),
			"--", "/usr/bin/python3", script, "serve", "8080")
		cmd.Dir = x.repo
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
		if !waitFor(func() bool { return echoOnce(pub) == nil }) {
			b.Fatal("nothing answered through --publish")
		}
		var d, v []time.Duration
		var r []float64
		for b.Loop() {
			t0 := time.Now()
			if err := echoOnce(direct); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if err := echoOnce(pub); err != nil {
				b.Fatal(err)
			}
			a, p := t1.Sub(t0), time.Since(t1)
			d, v, r = append(d, a), append(v, p), append(r, float64(p)/float64(a))
		}
		slices.Sort(d)
		slices.Sort(v)
		slices.Sort(r)
		b.ReportMetric(float64(d[len(d)/2].Nanoseconds()), "direct-ns")
		b.ReportMetric(float64(v[len(v)/2].Nanoseconds()), "publish-ns")
		b.ReportMetric(r[len(r)/2], "ratio")
	})
	// host-port: a client inside, direct to an echo server inside and through
	// --host-port to the same server on the host (the client measures, in the
	// sandbox; b.N exchanges each way in one session).
	b.Run("host-port", func(b *testing.B) {
		x, script := portBenchBox(b)
		hp := hostEcho(b, script)
		n := b.N
		cmd := testenv.Command(b, x.home, x.bin, "exec", "--no-git-save", "--no-record", "--offline", "--host-port", fmt.Sprintf("9000:%d", hp),
			"--", "/bin/sh", "-c", fmt.Sprintf(`/usr/bin/python3 %[1]s serve 8081 >/tmp/ready & while ! grep -q listening /tmp/ready; do sleep 0.02; done
exec /usr/bin/python3 %[1]s client 8081 9000 %[2]d`, script, n))
		cmd.Dir = x.repo
		var stderr strings.Builder
		cmd.Stderr = &stderr // agentbox says it killed the server inside
		out, err := cmd.Output()
		f := strings.Fields(string(out))
		if err != nil || len(f) != 3 {
			b.Fatalf("session: %v\n%s%s", err, out, stderr.String())
		}
		dn, _ := strconv.ParseFloat(f[0], 64)
		vn, _ := strconv.ParseFloat(f[1], 64)
		ratio, _ := strconv.ParseFloat(f[2], 64)
		b.ReportMetric(dn, "direct-ns")
		b.ReportMetric(vn, "host-port-ns")
		b.ReportMetric(ratio, "ratio")
	})
}
