package sshagent

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"strconv"

	"golang.org/x/sys/unix"
)

// ErrForeignAgent: the socket at SSH_AUTH_SOCK is another user's.
var ErrForeignAgent = errors.New("another user's agent")

// checkPeer refuses an agent served by a process of another user. SSH_AUTH_SOCK is a
// path, often below /tmp: once the user's agent is gone (a stale variable in a
// long-lived shell), another local user can make a socket at that very path and
// serve an agent of their own there, which would learn every host and user the
// session signs in to and answer with keys of its choosing. ssh-agent's socket is the
// user's own; root's is accepted too, and under sudo the invoking user's (SUDO_UID),
// whose agent root's launch may use.
func checkPeer(c net.Conn) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) { cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return err
	}
	if credErr != nil {
		return fmt.Errorf("cannot tell who serves it: %w", credErr)
	}
	euid := os.Geteuid()
	if int(cred.Uid) == euid || cred.Uid == 0 {
		return nil
	}
	if sudo := os.Getenv("SUDO_UID"); euid == 0 && sudo == strconv.FormatUint(uint64(cred.Uid), 10) {
		return nil
	}
	who := "uid " + strconv.FormatUint(uint64(cred.Uid), 10)
	if u, err := user.LookupId(strconv.FormatUint(uint64(cred.Uid), 10)); err == nil {
		who = u.Username + " (" + who + ")"
	}
	return fmt.Errorf("%w: served by %s (pid %d), not by you; it would see every host the session signs in to, and choose the keys", ErrForeignAgent, who, cred.Pid)
}
