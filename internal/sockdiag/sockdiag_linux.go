// Package sockdiag runs one dump request of the kernel's NETLINK_SOCK_DIAG
// (sock_diag(7)) in the caller's network namespace and hands each reply message's
// body to the caller, who knows its family's layout: unix_diag for the host socket
// scan (internal/kernel), inet_diag for --host-port's owners (session/portsvc).
package sockdiag

import (
	"encoding/binary"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// Dump sends SOCK_DIAG_BY_FAMILY with NLM_F_DUMP and body (the family's request
// struct, starting with its family byte) and calls each with the body of every
// reply message until the dump is done.
func Dump(body []byte, each func([]byte)) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return fmt.Errorf("sock_diag: %w", err)
	}
	defer unix.Close(fd)
	req := make([]byte, unix.NLMSG_HDRLEN+len(body))
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	ne.PutUint32(req[8:], 1)
	copy(req[unix.NLMSG_HDRLEN:], body)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("sock_diag: %w", err)
	}
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return fmt.Errorf("sock_diag: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return fmt.Errorf("sock_diag: %w", err)
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if e := int32(ne.Uint32(m.Data)); e != 0 {
						return fmt.Errorf("sock_diag: %w", unix.Errno(-e))
					}
				}
				return fmt.Errorf("sock_diag: error reply")
			}
			each(m.Data)
		}
	}
}
