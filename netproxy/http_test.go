package netproxy

import (
	"bufio"
	"bytes"
	"net/url"
	"strings"
	"testing"
)

// FuzzReadHead: whatever a client sends, the head reader returns a request or an
// error, never panics, never reads past maxHead; what it accepts forwards as one
// origin-form request with the URL's Host, ending in Connection: close.
func FuzzReadHead(f *testing.F) {
	for _, s := range []string{
		"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test\r\n\r\n",
		"GET http://a.test/x?y HTTP/1.1\r\nHost: b.test\r\nConnection: keep-alive, X-Drop\r\nX-Drop: 1\r\n\r\nbody",
		"GET / HTTP/1.0\r\n\r\n", "\x05\x01\x00", "GET  http://a/ HTTP/1.1\r\n\r\n", "A B C\r\n folded\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := readHead(bufio.NewReader(bytes.NewReader(in)))
		if err != nil {
			return
		}
		if r.method == "" || strings.ContainsAny(r.method+r.target+r.proto, " \r\n") {
			t.Fatalf("accepted a bad request line %q %q %q", r.method, r.target, r.proto)
		}
		u, err := url.Parse(r.target)
		if err != nil || u.Host == "" || strings.ContainsAny(u.Host, "\r\n") {
			return
		}
		head := string(r.forwardHead(u))
		if !strings.HasSuffix(head, "Connection: close\r\n\r\n") || strings.Count(head, "\r\n\r\n") != 1 {
			t.Fatalf("forward head %q", head)
		}
		for _, l := range strings.Split(head, "\r\n")[1:] {
			n, _, _ := strings.Cut(l, ":")
			if strings.EqualFold(n, "host") && l != "Host: "+u.Host {
				t.Fatalf("forwarded the client's Host: %q (URL host %q)", l, u.Host)
			}
			if strings.EqualFold(strings.TrimSpace(n), "proxy-authorization") || strings.EqualFold(strings.TrimSpace(n), "keep-alive") {
				t.Fatalf("forwarded a hop-by-hop header: %q", l)
			}
		}
	})
}

func TestReadHeadLimits(t *testing.T) {
	big := "GET http://a.test/ HTTP/1.1\r\nX: " + strings.Repeat("a", maxHead) + "\r\n\r\n"
	if _, err := readHead(bufio.NewReader(strings.NewReader(big))); err != errTooLarge {
		t.Errorf("oversized head: %v", err)
	}
	for _, bad := range []string{"GET http://a/ HTTP/2\r\n\r\n", "GET http://a/\r\n\r\n", "GET http://a/ HTTP/1.1\r\n folded: x\r\n\r\n",
		"GET http://a/ HTTP/1.1\r\nno colon\r\n\r\n", "GET http://a/ HTTP/1.1\r\nX: a\rb\r\n\r\n", "G\x00T http://a/ HTTP/1.1\r\n\r\n"} {
		if _, err := readHead(bufio.NewReader(strings.NewReader(bad))); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}
