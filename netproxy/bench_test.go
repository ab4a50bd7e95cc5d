package netproxy

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/pace"
)

// The proxy's cost, on loopback: a 100 MB download direct and through each of the
// proxy's ways (CONNECT tunnel, http:// forwarding, SOCKS5), and the time one short
// request on a new connection takes direct and through a tunnel (the difference is
// the latency the proxy adds per connection: its accept, the decision with a name
// lookup, its dial, the CONNECT round trip).
//
//	go test -run '^$' -bench AddedLatency -benchtime 2000x ./netproxy
//	go test -run '^$' -bench PairedDownload -benchtime 7x ./netproxy
//
// docs/network.md has the figures.

const benchSize = 100 << 20

func benchServer(b *testing.B) (port string) {
	zeros := make([]byte, 1<<20)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := benchSize
		if r.URL.Path == "/small" {
			n = 100
		}
		w.Header().Set("Content-Length", strconv.Itoa(n))
		for n > 0 {
			k := min(n, len(zeros))
			w.Write(zeros[:k])
			n -= k
		}
	})}
	go srv.Serve(l)
	b.Cleanup(func() { srv.Close() })
	_, port, _ = net.SplitHostPort(l.Addr().String())
	return port
}

func benchProxy(b *testing.B) string {
	rules, _ := ParseAll([]string{"bench.test", "127.0.0.1"})
	p := New(Config{Rules: rules, Resolver: Hosts{"bench.test": {netip.MustParseAddr("127.0.0.1")}}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go p.Serve(l)
	b.Cleanup(func() { p.Close() })
	return l.Addr().String()
}

// get sends a GET for path on c (already at the server) and reads the whole body.
func get(b *testing.B, c net.Conn, br *bufio.Reader, target string, want int64) {
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: bench.test\r\nConnection: close\r\n\r\n", target)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		b.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || n != want {
		b.Fatalf("read %d bytes (%v), want %d", n, err, want)
	}
}

type way func(b *testing.B, proxy, port, path string, want int64)

func direct(b *testing.B, _, port, path string, want int64) {
	c, err := net.Dial("tcp", "127.0.0.1:"+port)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	get(b, c, bufio.NewReader(c), path, want)
}

func viaConnect(b *testing.B, proxy, port, path string, want int64) {
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT bench.test:%s HTTP/1.1\r\nHost: bench.test\r\n\r\n", port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		b.Fatalf("CONNECT: %v %v", resp, err)
	}
	get(b, c, br, path, want)
}

func viaForward(b *testing.B, proxy, port, path string, want int64) {
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	get(b, c, bufio.NewReader(c), "http://bench.test:"+port+path, want)
}

func viaSOCKS(b *testing.B, proxy, port, path string, want int64) {
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	p, _ := strconv.Atoi(port)
	req := []byte{5, 1, 0, 5, 1, 0, 3, byte(len("bench.test"))}
	req = append(req, "bench.test"...)
	req = binary.BigEndian.AppendUint16(req, uint16(p))
	c.Write(req)
	var rep [12]byte
	if _, err := io.ReadFull(c, rep[:]); err != nil || rep[3] != 0 {
		b.Fatalf("SOCKS: %v %v", rep, err)
	}
	get(b, c, bufio.NewReader(c), path, want)
}

var ways = []struct {
	name string
	fn   way
}{{"direct", direct}, {"connect", viaConnect}, {"forward", viaForward}, {"socks5", viaSOCKS}}

// BenchmarkDownload: MB/s of a 100 MB download.
func BenchmarkDownload(b *testing.B) {
	port, proxy := benchServer(b), benchProxy(b)
	for _, w := range ways {
		b.Run(w.name, func(b *testing.B) {
			b.SetBytes(benchSize)
			for b.Loop() {
				w.fn(b, proxy, port, "/big", benchSize)
			}
		})
	}
}

// BenchmarkConnection: ns per new connection with one short request.
func BenchmarkConnection(b *testing.B) {
	port, proxy := benchServer(b), benchProxy(b)
	for _, w := range ways {
		b.Run(w.name, func(b *testing.B) {
			for b.Loop() {
				w.fn(b, proxy, port, "/small", 100)
			}
		})
	}
}

// BenchmarkAddedLatency: each iteration makes one connection direct and one through
// each way of the proxy, back to back, so that a loaded machine slows both alike;
// it reports the median of the differences (added-ns: through minus direct).
func BenchmarkAddedLatency(b *testing.B) {
	port, proxy := benchServer(b), benchProxy(b)
	for _, w := range ways[1:] {
		b.Run(w.name, func(b *testing.B) {
			var diffs []time.Duration
			for b.Loop() {
				t0 := time.Now()
				direct(b, proxy, port, "/small", 100)
				t1 := time.Now()
				w.fn(b, proxy, port, "/small", 100)
				diffs = append(diffs, time.Since(t1)-t1.Sub(t0))
			}
			slices.Sort(diffs)
			b.ReportMetric(float64(diffs[len(diffs)/2].Nanoseconds()), "added-ns")
		})
	}
}

// BenchmarkPairedDownload: each iteration downloads 100 MB direct and then through
// each way, back to back; it reports the median rate of each (MB/s) and the median
// ratio through/direct, which a loaded machine disturbs less than either rate.
func BenchmarkPairedDownload(b *testing.B) {
	port, proxy := benchServer(b), benchProxy(b)
	for _, w := range ways[1:] {
		b.Run(w.name, func(b *testing.B) {
			var direct_, through, ratio []float64
			for b.Loop() {
				t0 := time.Now()
				direct(b, proxy, port, "/big", benchSize)
				t1 := time.Now()
				w.fn(b, proxy, port, "/big", benchSize)
				d, p := t1.Sub(t0).Seconds(), time.Since(t1).Seconds()
				direct_ = append(direct_, benchSize/1e6/d)
				through = append(through, benchSize/1e6/p)
				ratio = append(ratio, d/p)
			}
			med := func(x []float64) float64 { slices.Sort(x); return x[len(x)/2] }
			b.ReportMetric(med(direct_), "direct-MB/s")
			b.ReportMetric(med(through), "proxy-MB/s")
			b.ReportMetric(med(ratio), "ratio")
		})
	}
}

// BenchmarkRefusal: one refused request on a new connection, answer read, with
// the default decision (the host's own addresses asked as a session's proxy asks
// them). The gate that paces such connections is the test's, wide enough never
// to wait: this is the cost of one refusal, not the pace.
//
//	go test -run '^$' -bench Refusal -benchtime 5000x ./netproxy
func BenchmarkRefusal(b *testing.B) {
	rules, _ := ParseAll([]string{"allowed.test"})
	p := New(Config{Rules: rules, endGate: pace.NewGate(time.Nanosecond, 1<<30)})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go p.Serve(l)
	b.Cleanup(func() { p.Close() })
	req := []byte("CONNECT refused.test:443 HTTP/1.1\r\n\r\n")
	buf := make([]byte, 200)
	for b.Loop() {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		c.Write(req)
		if _, err := io.ReadAtLeast(c, buf, 12); err != nil || string(buf[9:12]) != "403" {
			b.Fatalf("answer %q, %v", buf, err)
		}
		c.Close()
	}
}
