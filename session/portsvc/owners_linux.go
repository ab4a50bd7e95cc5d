package portsvc

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sockdiag"
)

// listener is a TCP socket of the launcher's network namespace in the listening
// state, as sock_diag's inet_diag reports it: where it is bound, and the uid that
// made it (idiag_uid, which the /proc tables give too, but per line to parse).
type listener struct {
	addr   netip.Addr // unmapped
	port   int
	uid    uint32
	v6only bool // an IPv6 wildcard that takes no IPv4 connections
}

// inet_diag's request (linux/inet_diag.h: inet_diag_req_v2) and reply layout.
const (
	inetDiagReqLen   = 56
	inetDiagMsgLen   = 72 // family … inode
	inetDiagSKV6Only = 11
	tcpListen        = 10
)

// loopbackListeners asks inet_diag for the TCP listeners of both families at port.
func loopbackListeners(port int) ([]listener, error) {
	var out []listener
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		ls, err := dumpListeners(family, port)
		if err != nil {
			return nil, err
		}
		out = append(out, ls...)
	}
	return out, nil
}

func dumpListeners(family uint8, port int) ([]listener, error) {
	body := make([]byte, inetDiagReqLen)
	body[0], body[1] = family, unix.IPPROTO_TCP
	binary.NativeEndian.PutUint32(body[4:], 1<<tcpListen)
	var out []listener
	err := sockdiag.Dump(body, func(b []byte) {
		if l, ok := parseInetDiag(b); ok && l.port == port {
			out = append(out, l)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("inet_diag: %w", err)
	}
	return out, nil
}

// parseInetDiag reads one inet_diag_msg and its INET_DIAG_SKV6ONLY attribute.
func parseInetDiag(b []byte) (listener, bool) {
	if len(b) < inetDiagMsgLen {
		return listener{}, false
	}
	ne := binary.NativeEndian
	l := listener{port: int(binary.BigEndian.Uint16(b[4:])), uid: ne.Uint32(b[64:])}
	switch b[0] {
	case unix.AF_INET:
		l.addr = netip.AddrFrom4([4]byte(b[8:12]))
	case unix.AF_INET6:
		l.addr = netip.AddrFrom16([16]byte(b[8:24])).Unmap()
	default:
		return listener{}, false
	}
	for a := b[inetDiagMsgLen:]; len(a) >= 4; {
		n := int(ne.Uint16(a))
		if n < 4 || n > len(a) {
			break
		}
		if ne.Uint16(a[2:]) == inetDiagSKV6Only && n >= 5 {
			l.v6only = a[4] != 0
		}
		a = a[min((n+3)&^3, len(a)):]
	}
	return l, true
}

// ownersAt are the uids of the listeners a connection to the loopback addr (127.0.0.1
// or ::1) reaches: those bound to it exactly, or, when none is, the wildcards that
// take it (0.0.0.0 and a dual-stack :: for 127.0.0.1, :: for ::1), as the kernel's
// lookup prefers the exact address.
func ownersAt(ls []listener, addr netip.Addr) []uint32 {
	var exact, wild []uint32
	for _, l := range ls {
		switch {
		case l.addr == addr:
			exact = append(exact, l.uid)
		case addr.Is4() && (l.addr == netip.IPv4Unspecified() || l.addr == netip.IPv6Unspecified() && !l.v6only),
			addr.Is6() && l.addr == netip.IPv6Unspecified():
			wild = append(wild, l.uid)
		}
	}
	if len(exact) > 0 {
		return exact
	}
	return wild
}

// preferIPv6 says whether --host-port's dial to port should try [::1] before
// 127.0.0.1: when the launching user's own server listens on ::1 and what listens on
// 127.0.0.1 is not only theirs (another local user can bind 127.0.0.1:PORT and take
// the connections meant for the user's server on ::1) — nothing included: a
// listener another user binds on 127.0.0.1 between this query and the dial would
// take the connection that the query found refused there. Any error keeps the usual
// order.
func preferIPv6(port int, uid uint32) bool {
	ls, err := loopbackListeners(port)
	if err != nil {
		return false
	}
	mine := func(uids []uint32) bool {
		for _, u := range uids {
			if u != uid {
				return false
			}
		}
		return len(uids) > 0
	}
	v4, v6 := ownersAt(ls, netip.AddrFrom4([4]byte{127, 0, 0, 1})), ownersAt(ls, netip.IPv6Loopback())
	return !mine(v4) && mine(v6)
}
