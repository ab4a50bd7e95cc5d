//go:build !linux

package sshagent

import (
	"errors"
	"net"
)

// ErrForeignAgent: the socket at SSH_AUTH_SOCK is another user's.
var ErrForeignAgent = errors.New("another user's agent")

// checkPeer: agentbox's sessions run on Linux only.
func checkPeer(net.Conn) error { return nil }
