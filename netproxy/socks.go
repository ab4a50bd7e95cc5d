package netproxy

import (
	"bufio"
	"encoding/binary"
	"io"
	"net/netip"
	"time"
)

// SOCKS5 (RFC 1928), CONNECT only and without authentication: what Git over ssh
// (a ProxyCommand), curl's socks5h:// and other TCP clients need. The client sends
// the name (ATYP 3) with socks5h, so the rules see it as with CONNECT.
const (
	socksVersion     = 5
	socksNoAuth      = 0
	socksNoMethod    = 0xff
	socksConnect     = 1
	socksIPv4        = 1
	socksDomain      = 3
	socksIPv6        = 4
	repSucceeded     = 0
	repNotAllowed    = 2
	repHostUnreach   = 4
	repCmdNotSupport = 7
	repAtypNotSupp   = 8
)

func (s *Server) serveSOCKS(tc *trackedConn, br *bufio.Reader) {
	defer func() {
		if tc != nil {
			tc.Close()
		}
	}()
	_ = tc.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	// Greeting: version, the number of methods, the methods.
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return
	}
	method := byte(socksNoMethod)
	for _, m := range methods {
		if m == socksNoAuth {
			method = socksNoAuth
		}
	}
	if _, err := tc.Write([]byte{socksVersion, method}); err != nil || method != socksNoAuth {
		return
	}
	// Request: version, command, reserved, address type, address, port.
	var req [4]byte
	if _, err := io.ReadFull(br, req[:]); err != nil || req[0] != socksVersion {
		return
	}
	var host string
	switch req[3] {
	case socksIPv4, socksIPv6:
		b := make([]byte, 4)
		if req[3] == socksIPv6 {
			b = make([]byte, 16)
		}
		if _, err := io.ReadFull(br, b); err != nil {
			return
		}
		a, _ := netip.AddrFromSlice(b)
		host = a.String()
	case socksDomain:
		n, err := br.ReadByte()
		if err != nil {
			return
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			return
		}
		host = string(b)
	default:
		s.socksReply(tc, repAtypNotSupp)
		return
	}
	var pb [2]byte
	if _, err := io.ReadFull(br, pb[:]); err != nil {
		return
	}
	port := binary.BigEndian.Uint16(pb[:])
	if req[1] != socksConnect {
		s.socksReply(tc, repCmdNotSupport)
		return
	}
	addrs, err := s.Decide(s.ctx, host, port)
	if err != nil {
		if _, ok := err.(*refusal); ok {
			s.socksReply(tc, repNotAllowed)
		} else {
			s.socksReply(tc, repHostUnreach)
		}
		return
	}
	up, err := s.dial(s.ctx, addrs, port)
	if err != nil {
		s.failed(host, port, dialFailure(err))
		s.socksReply(tc, repHostUnreach)
		return
	}
	upt := s.trackUp(up)
	if !s.socksReply(tc, repSucceeded) {
		upt.Close()
		return
	}
	_ = tc.SetDeadline(time.Time{})
	early := buffered(br)
	c := tc
	tc = nil // the tunnel closes it
	s.tunnel(c, early, upt)
}

// socksReply answers the request with rep; the bound address is not disclosed.
func (s *Server) socksReply(tc *trackedConn, rep byte) bool {
	_, err := tc.Write([]byte{socksVersion, rep, 0, socksIPv4, 0, 0, 0, 0, 0, 0})
	return err == nil && rep == repSucceeded
}
