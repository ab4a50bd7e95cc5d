package netproxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// maxHead bounds a request's line and headers.
const maxHead = 64 << 10

// request is the head of one HTTP/1.x request to the proxy.
type request struct {
	method, target, proto string
	headers               []string // raw "Name: value" lines, in order
}

// errTooLarge is a head beyond maxHead.
var errTooLarge = errors.New("request head too large")

// readHead reads a request line and its headers, strictly: no folded lines, no bare
// CR, at most maxHead bytes.
func readHead(br *bufio.Reader) (*request, error) {
	total := 0
	line := func() (string, error) {
		var b []byte
		for {
			frag, err := br.ReadSlice('\n')
			total += len(frag)
			if total > maxHead {
				return "", errTooLarge
			}
			b = append(b, frag...)
			if err == bufio.ErrBufferFull {
				continue
			}
			if err != nil {
				return "", err
			}
			break
		}
		s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		if strings.ContainsAny(s, "\r\x00") {
			return "", errors.New("bad character in the request head")
		}
		return s, nil
	}
	first, err := line()
	if err != nil {
		return nil, err
	}
	parts := strings.Split(first, " ")
	if len(parts) != 3 || !isToken(parts[0]) || parts[1] == "" || (parts[2] != "HTTP/1.1" && parts[2] != "HTTP/1.0") {
		return nil, errors.New("not an HTTP/1.x request line")
	}
	r := &request{method: parts[0], target: parts[1], proto: parts[2]}
	for {
		h, err := line()
		if err != nil {
			return nil, err
		}
		if h == "" {
			return r, nil
		}
		name, _, ok := strings.Cut(h, ":")
		if !ok || !isToken(name) {
			return nil, errors.New("bad header line")
		}
		r.headers = append(r.headers, h)
	}
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// header returns the value of the first header called name.
func (r *request) header(name string) (string, bool) {
	for _, h := range r.headers {
		n, v, _ := strings.Cut(h, ":")
		if strings.EqualFold(n, name) {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// hopByHop are the headers that concern only the connection to the proxy.
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authorization", "Proxy-Authenticate", "Te", "Trailer", "Upgrade"}

// forwardHead is r in origin form for the upstream, one request per connection:
// hop-by-hop headers (and those Connection names) dropped, "Connection: close"
// added, and Host the URL's, whatever the client sent: a Host of another site would
// have a shared front end (a CDN serving the allowed name) pass the request on to a
// host that is not allowed.
func (r *request) forwardHead(u *url.URL) []byte {
	drop := map[string]bool{"host": true}
	for _, h := range hopByHop {
		drop[strings.ToLower(h)] = true
	}
	if v, ok := r.header("Connection"); ok {
		for _, n := range strings.Split(v, ",") {
			drop[strings.ToLower(strings.TrimSpace(n))] = true
		}
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s %s\r\n", r.method, u.RequestURI(), r.proto)
	fmt.Fprintf(&b, "Host: %s\r\n", u.Host)
	for _, h := range r.headers {
		n, _, _ := strings.Cut(h, ":")
		if !drop[strings.ToLower(strings.TrimSpace(n))] {
			b.WriteString(h)
			b.WriteString("\r\n")
		}
	}
	b.WriteString("Connection: close\r\n\r\n")
	return b.Bytes()
}

// serveHTTP serves one HTTP request: a CONNECT tunnel, or an http:// URL forwarded
// as the upstream's only request on its connection. After the head the bytes go
// through unparsed, both ways, to that one host: a client that sends a second
// request on the connection reaches nobody else.
func (s *Server) serveHTTP(tc *trackedConn, br *bufio.Reader) {
	r, err := readHead(br)
	if err != nil {
		switch {
		case err == errTooLarge:
			s.answer(tc, "431 Request Header Fields Too Large", "agentbox: request head larger than 64 KiB")
		case err == io.EOF:
			tc.Close()
		default:
			s.answer(tc, "400 Bad Request", "agentbox: "+err.Error())
		}
		return
	}
	var host string
	var port uint16
	var u *url.URL
	if r.method == "CONNECT" {
		host, port, err = splitTarget(r.target)
	} else {
		u, err = url.Parse(r.target)
		if err == nil && (!strings.EqualFold(u.Scheme, "http") || u.Host == "" || u.User != nil) {
			err = errors.New("this proxy forwards http:// URLs and CONNECT tunnels only")
		}
		if err == nil {
			host, port = u.Hostname(), 80
			if p := u.Port(); p != "" {
				port, err = parsePort(p)
			}
		}
	}
	if err != nil {
		s.answer(tc, "400 Bad Request", "agentbox: "+err.Error())
		return
	}
	addrs, err := s.Decide(s.ctx, host, port)
	var up *trackedConn
	if err == nil {
		conn, derr := s.dial(s.ctx, addrs, port)
		if derr != nil {
			s.failed(host, port, dialFailure(derr))
			err = fmt.Errorf("agentbox: cannot connect to %s", joinHostPort(hostForRecord(host), port))
		} else {
			up = s.trackUp(conn)
		}
	}
	if err != nil {
		status := "502 Bad Gateway"
		var ref *refusal
		if errors.As(err, &ref) {
			// The refusal in the status line too: that is what clients show.
			status = "403 " + ref.msg
		}
		s.answer(tc, status, err.Error())
		return
	}
	_ = tc.SetReadDeadline(time.Time{})
	if r.method == "CONNECT" {
		if _, err := io.WriteString(tc.Conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			tc.Close()
			up.Close()
			return
		}
		s.tunnel(tc, buffered(br), up)
		return
	}
	// What the client sent after the head (its body, or its start) follows it.
	s.tunnel(tc, append(r.forwardHead(u), buffered(br)...), up)
}

// splitTarget splits CONNECT's authority "host:port" ("[v6]:port").
func splitTarget(t string) (string, uint16, error) {
	i := strings.LastIndexByte(t, ':')
	if i < 0 {
		return "", 0, errors.New("CONNECT wants HOST:PORT")
	}
	port, err := parsePort(t[i+1:])
	if err != nil {
		return "", 0, errors.New("CONNECT wants HOST:PORT")
	}
	return t[:i], port, nil
}

// answer writes a complete response and closes the connection: its write side
// first, then, after a short drain of what the client still sends (a request body),
// the rest, so that the client reads the answer rather than a reset.
func (s *Server) answer(tc *trackedConn, status, body string) {
	defer tc.Close()
	body += "\n"
	_ = tc.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	fmt.Fprintf(tc.Conn, "HTTP/1.1 %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: %s\r\n\r\n%s",
		status, strconv.Itoa(len(body)), body)
	if cw, ok := tc.Conn.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		_ = tc.SetReadDeadline(time.Now().Add(time.Second))
		_, _ = io.CopyN(io.Discard, tc.Conn, 1<<20)
	}
}
