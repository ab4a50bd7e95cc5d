// Package protocol is what the launcher and the Go init say to each other over
// their control socket: length-prefixed JSON frames, lock-step (the diagram below),
// and the names both sides share (the init's role variables, its setup status,
// the launch's phases). The raw init speaks fixed-size records instead
// (nsinit/rawinit_linux_amd64.go).
package protocol

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/eintr"
	"github.com/agentbox/agentbox/mounts"
)

// The launcher and the init talk over one socketpair (fd 3 in the init), in
// length-prefixed JSON frames, lock-step:
//
//	launcher                                init (PID 1, new namespaces)
//	   |------------ MsgPlan ------------------>|  plan, command env, foreground
//	   |                                        |  mounts, loopback up
//	   |<----------- MsgListener ---------------|  with --allow-net or --host-port: the
//	   |                                        |  listening sockets in the new netns
//	   |                                        |  (SCM_RIGHTS): the proxy's, then one
//	   |                                        |  per Plan.HostPorts
//	   |                                        |  drop privileges, fork command
//	   |<----------- MsgStarted ----------------|  phases, command PID
//	   |     or MsgError (step, path, reason) --|  then the init exits 125
//	   |                                        |
//	   |<----------- MsgStopped ----------------|  the command stopped (job control)
//	   |------------ MsgContinue -------------->|  launcher was resumed (fg or bg)
//	   |------------ MsgSignal ---------------->|  a signal for the command
//	   |------------ MsgSocket ---------------->|  with --publish: a new TCP socket of
//	   |<----------- MsgSocket -----------------|  the netns, unconnected (none: refused)
//	   |                  ...                   |
//	   |<----------- MsgEnded ------------------|  the signal that ended the command, and
//	   |                                        |  how many processes were left and killed
//	   |<----------- MsgExited -----------------|  status; every process gone (native)
//	   '-- init exits with the command's status (128+N for signal N)
//
// The socket is close-on-exec in the init: the command never sees it.
// The frames' types.
const (
	MsgPlan     = "plan"
	MsgStarted  = "started"
	MsgError    = "error"
	MsgStopped  = "stopped"
	MsgContinue = "continue"
	MsgSignal   = "signal"
	MsgEnded    = "ended"
	MsgExited   = "exited"
	MsgListener = "listener"
	MsgSocket   = "socket"
)

// Message is every frame; Type says which fields are set.
type Message struct {
	Type string `json:"type"`

	// MsgPlan
	Plan       *mounts.Plan `json:"plan,omitempty"`
	Env        []string     `json:"env,omitempty"`
	Foreground bool         `json:"foreground,omitempty"` // also MsgContinue
	Nested     bool         `json:"nested,omitempty"`     // namespaces and mounts built by bwrap
	// Continue: no shell can resume the launcher (none of its streams is its
	// controlling terminal), so the init continues a stopped command itself and
	// sends no MsgStopped.
	Continue bool `json:"continue,omitempty"`

	// MsgSignal: the signal the launcher received, for the command; MsgEnded: the
	// signal that killed the command, 0 when it exited
	Signal int `json:"signal,omitempty"`
	// MsgEnded: the processes still running when the command ended, which the init
	// killed
	Left int `json:"left,omitempty"`

	// MsgStarted
	Phases []Phase `json:"phases,omitempty"`
	PID    int     `json:"pid,omitempty"`

	// MsgExited: the command's status, every process of the sandbox gone, and the
	// init's own peak RSS (VmHWM: rusage would count the launcher's memory, which
	// the vforked init shared until its execve)
	Status     int   `json:"status,omitempty"`
	PeakRSSKiB int64 `json:"peak_rss_kib,omitempty"`

	// MsgError
	Step   string `json:"step,omitempty"`
	Reason string `json:"reason,omitempty"`

	// fds came with the frame (MsgListener: the listening sockets; MsgSocket: the
	// new socket, or none); the reader owns them.
	Fds []int `json:"-"`
}

// maxFrame bounds a frame: a plan with a large environment fits many times over.
const maxFrame = 16 << 20

// Write sends m on w; fds, when given, travel with the frame's first byte
// (SCM_RIGHTS), which needs w to be the control socket itself.
func Write(w io.Writer, m *Message, fds ...*os.File) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	frame := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(frame, uint32(len(b)))
	copy(frame[4:], b)
	if len(fds) == 0 {
		_, err = w.Write(frame)
		return err
	}
	sock, ok := w.(*os.File)
	if !ok {
		return fmt.Errorf("descriptors need a socket, not %T", w)
	}
	rights := make([]int, len(fds))
	for i, f := range fds {
		rights[i] = int(f.Fd())
	}
	oob := unix.UnixRights(rights...)
	rc, err := sock.SyscallConn()
	if err != nil {
		return err
	}
	var sendErr error
	err = rc.Write(func(fd uintptr) bool {
		var n int
		n, sendErr = unix.SendmsgN(int(fd), frame, oob, nil, 0)
		if sendErr == unix.EAGAIN {
			return false
		}
		if sendErr == nil && n < len(frame) {
			// The descriptors went with the first byte; the rest is plain data.
			_, sendErr = sock.Write(frame[n:])
		}
		return true
	})
	if err != nil {
		return err
	}
	return sendErr
}

func Read(r io.Reader) (*Message, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	return readBody(r, hdr)
}

// ReadFds reads a Message from the socket ctl and the descriptors that came with
// its first byte, received close-on-exec.
func ReadFds(ctl *os.File) (*Message, []int, error) {
	var hdr [4]byte
	oob := make([]byte, unix.CmsgSpace(MaxFds*4))
	var oobn int
	n, err := eintr.Retry(func() (n int, err error) {
		n, oobn, _, _, err = unix.Recvmsg(int(ctl.Fd()), hdr[:], oob, unix.MSG_CMSG_CLOEXEC)
		return n, err
	})
	if err != nil {
		return nil, nil, err
	}
	if n == 0 {
		return nil, nil, io.EOF
	}
	return readRest(ctl, hdr, n, oob[:oobn], true)
}

// ReadPolled is ReadFds for the launcher's end, which Go's poller owns: the
// header's first bytes come through recvmsg (a plain read would drop descriptors
// that came with them), and the frame's descriptors land in m.Fds.
func ReadPolled(ctl *os.File) (*Message, error) {
	rc, err := ctl.SyscallConn()
	if err != nil {
		return nil, err
	}
	var hdr [4]byte
	oob := make([]byte, unix.CmsgSpace(MaxFds*4))
	var n, oobn, flags int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		n, oobn, flags, _, rerr = unix.Recvmsg(int(fd), hdr[:], oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return nil, err
	}
	if flags&unix.MSG_CTRUNC != 0 {
		// The kernel dropped descriptors that did not fit: a frame that lost part of
		// what it carries is refused, never taken as complete.
		closeCmsgFds(oob[:oobn])
		return nil, fmt.Errorf("control socket: a frame carried more than %d descriptors", MaxFds)
	}
	if n == 0 {
		return nil, io.EOF
	}
	m, fds, err := readRest(ctl, hdr, n, oob[:oobn], false)
	if err != nil {
		return nil, err
	}
	m.Fds = fds
	return m, nil
}

// readRest takes the descriptors that came with a frame's first n bytes (oob),
// reads the rest of the frame, and returns it with them; on an error it closes
// them. strict: a malformed control message is an error (the init's end), else
// what cannot be parsed is dropped (the launcher's).
func readRest(ctl *os.File, hdr [4]byte, n int, oob []byte, strict bool) (*Message, []int, error) {
	var fds []int
	closeFds := func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	if len(oob) > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob)
		if err != nil && strict {
			return nil, nil, fmt.Errorf("control message: %w", err)
		}
		for _, cm := range msgs {
			got, err := unix.ParseUnixRights(&cm)
			if err != nil && strict {
				closeFds()
				return nil, nil, fmt.Errorf("control message: %w", err)
			}
			fds = append(fds, got...)
		}
	}
	if _, err := io.ReadFull(ctl, hdr[n:]); err != nil {
		closeFds()
		return nil, nil, err
	}
	m, err := readBody(ctl, hdr)
	if err != nil {
		closeFds()
		return nil, nil, err
	}
	return m, fds, nil
}

func readBody(r io.Reader, hdr [4]byte) (*Message, error) {
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxFrame {
		return nil, fmt.Errorf("frame of %d bytes exceeds %d", n, maxFrame)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	m := new(Message)
	if err := json.Unmarshal(b, m); err != nil {
		return nil, err
	}
	return m, nil
}

// MaxFds bounds the descriptors one frame carries: the proxy's listener and one per
// --host-port (policy.MaxForwards), the init's answer to a socket request.
const MaxFds = 64

// closeCmsgFds closes the descriptors in a control message that is refused.
func closeCmsgFds(oob []byte) {
	cms, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	for _, cm := range cms {
		if fds, err := unix.ParseUnixRights(&cm); err == nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
		}
	}
}
