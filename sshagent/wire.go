// Package sshagent is the launcher's filter in front of the user's SSH agent
// (--ssh-agent, --ssh-key): it serves the agent protocol
// (draft-miller-ssh-agent) to the sandbox, lists and signs with only the chosen
// keys, refuses every request that would change the user's agent (adding,
// removing, locking keys) and every extension it does not know, and, when the
// session's network is an allowlist, signs only for SSH sessions that the client
// bound (session-bind@openssh.com) to a host key the user's known_hosts gives to an
// allowed host. Every signature request is recorded.
//
// The sandbox is hostile: a message longer than MaxMessage, a connection that
// stalls, a flood of connections or of messages (both paced: the launcher's work
// is outside the session's --cpus), or a host key made costly to verify costs the
// launcher a bounded amount of memory and time and never stops it. Use it only as a filter between an untrusted client
// and a trusted agent; it holds no keys itself.
package sshagent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Message numbers of the agent protocol (draft-miller-ssh-agent, section 5.1).
const (
	msgFailure           = 5
	msgSuccess           = 6
	msgRequestIdentities = 11
	msgIdentitiesAnswer  = 12
	msgSignRequest       = 13
	msgSignResponse      = 14
	msgAddIdentity       = 17
	msgRemoveIdentity    = 18
	msgRemoveAll         = 19
	msgAddSmartcard      = 20
	msgRemoveSmartcard   = 21
	msgLock              = 22
	msgUnlock            = 23
	msgAddIDConstrained  = 25
	msgAddSmartcardCons  = 26
	msgExtension         = 27
)

// MaxMessage bounds one agent message either way; OpenSSH's own agent uses the
// same bound (AGENT_MAX_LEN), so no real client sends more.
const MaxMessage = 256 << 10

var errTooLong = errors.New("agent message longer than 256 KiB")

// readMessage reads one length-prefixed message; the length is checked before
// anything is allocated.
func readMessage(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 {
		return nil, errors.New("empty agent message")
	}
	if n > MaxMessage {
		return nil, errTooLong
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// writeMessage writes msg with its length prefix in one write.
func writeMessage(w io.Writer, msg []byte) error {
	if len(msg) > MaxMessage {
		return errTooLong
	}
	buf := make([]byte, 4+len(msg))
	binary.BigEndian.PutUint32(buf, uint32(len(msg)))
	copy(buf[4:], msg)
	_, err := w.Write(buf)
	return err
}

// reader walks the fields of one message (RFC 4251 section 5 types); every read
// past the end fails rather than panics.
type reader struct {
	b   []byte
	err error
}

var errShort = errors.New("agent message truncated")

func (r *reader) byte() byte {
	if r.err != nil || len(r.b) < 1 {
		r.err = errShort
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) uint32() uint32 {
	if r.err != nil || len(r.b) < 4 {
		r.err = errShort
		return 0
	}
	v := binary.BigEndian.Uint32(r.b)
	r.b = r.b[4:]
	return v
}

func (r *reader) string() []byte {
	n := r.uint32()
	if r.err != nil {
		return nil
	}
	if uint64(n) > uint64(len(r.b)) {
		r.err = errShort
		return nil
	}
	s := r.b[:n:n]
	r.b = r.b[n:]
	return s
}

// done reports the first error, or one for trailing bytes.
func (r *reader) done() error {
	if r.err == nil && len(r.b) != 0 {
		return fmt.Errorf("agent message has %d trailing bytes", len(r.b))
	}
	return r.err
}

func appendString(b, s []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}
