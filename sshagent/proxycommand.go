package sshagent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// ProxyCommandName is the hidden agentbox subcommand that GitSSHCommand names:
// ssh's ProxyCommand inside a session with --allow-net, whose only way out is the
// launcher's SOCKS5 proxy. agentbox's own binary is on the read-only host view, so
// nothing needs installing inside (netcat-openbsd, which speaks SOCKS5 too, is
// optional on Debian).
const ProxyCommandName = "_ssh-proxy"

// GitSSHCommand is GIT_SSH_COMMAND for a session with --allow-net: ssh through
// exe's ProxyCommand to the proxy at proxyAddr. ok is false when exe's path would
// need quoting (ssh and Git both run it through the shell).
func GitSSHCommand(exe, proxyAddr string) (string, bool) {
	for _, c := range exe + proxyAddr {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("/._+-:", c)) {
			return "", false
		}
	}
	return fmt.Sprintf("ssh -o ProxyCommand='%s %s %s %%h %%p'", exe, ProxyCommandName, proxyAddr), true
}

// ProxyCommand connects to host:port through the SOCKS5 proxy at proxy (RFC 1928,
// no authentication, the name resolved by the proxy) and copies stdin to the
// connection and the connection to stdout until both are done.
func ProxyCommand(proxy, host, port string, stdin io.Reader, stdout io.Writer) error {
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 || host == "" || len(host) > 255 {
		return fmt.Errorf("bad destination %q port %q", host, port)
	}
	c, err := net.DialTimeout("tcp", proxy, 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	req := []byte{5, 1, 0, 5, 1, 0, 3, byte(len(host))}
	req = append(req, host...)
	req = binary.BigEndian.AppendUint16(req, uint16(p))
	if _, err := c.Write(req); err != nil {
		return err
	}
	if err := socksReply(c); err != nil {
		return err
	}
	_ = c.SetDeadline(time.Time{})
	go func() {
		_, _ = io.Copy(c, stdin)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	_, err = io.Copy(stdout, c)
	return err
}

// socksReply reads the method choice and the connect reply.
func socksReply(c net.Conn) error {
	var b [5]byte
	if _, err := io.ReadFull(c, b[:2]); err != nil {
		return err
	}
	if b[0] != 5 || b[1] != 0 {
		return errors.New("the proxy does not speak SOCKS5 without authentication")
	}
	if _, err := io.ReadFull(c, b[:5]); err != nil {
		return err
	}
	if b[1] != 0 {
		return fmt.Errorf("the proxy refused the connection (SOCKS5 reply %d; agentbox show lists why)", b[1])
	}
	var rest int
	switch b[3] {
	case 1:
		rest = 4 - 1 + 2
	case 4:
		rest = 16 - 1 + 2
	case 3:
		rest = int(b[4]) + 2
	default:
		return errors.New("malformed SOCKS5 reply")
	}
	_, err := io.ReadFull(c, make([]byte, rest))
	return err
}
