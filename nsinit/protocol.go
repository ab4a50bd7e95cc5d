package nsinit

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"

	"github.com/agentbox/agentbox/mounts"
)

// The launcher and the init talk over one socketpair (fd 3 in the init), in
// length-prefixed JSON frames, lock-step:
//
//	launcher                                init (PID 1, new namespaces)
//	   |------------ msgPlan ------------------>|  plan, command env, foreground
//	   |                                        |  mounts, drop privileges, fork command
//	   |<----------- msgStarted ----------------|  phases, command PID
//	   |     or msgError (step, path, reason) --|  then the init exits 125
//	   |                                        |
//	   |<----------- msgStopped ----------------|  the command stopped (job control)
//	   |------------ msgContinue -------------->|  launcher was resumed (fg or bg)
//	   |                  ...                   |
//	   '-- init exits with the command's status (128+N for signal N)
//
// The socket is close-on-exec in the init: the command never sees it.
const (
	msgPlan     = "plan"
	msgStarted  = "started"
	msgError    = "error"
	msgStopped  = "stopped"
	msgContinue = "continue"
)

// message is every frame; Type says which fields are set.
type message struct {
	Type string `json:"type"`

	// msgPlan
	Plan       *mounts.Plan `json:"plan,omitempty"`
	Env        []string     `json:"env,omitempty"`
	Foreground bool         `json:"foreground,omitempty"` // also msgContinue
	Nested     bool         `json:"nested,omitempty"`     // namespaces and mounts built by bwrap

	// msgStarted
	Phases []Phase `json:"phases,omitempty"`
	PID    int     `json:"pid,omitempty"`

	// msgError
	Step   string `json:"step,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// maxFrame bounds a frame: a plan with a large environment fits many times over.
const maxFrame = 16 << 20

func writeMsg(w io.Writer, m *message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	frame := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(frame, uint32(len(b)))
	copy(frame[4:], b)
	_, err = w.Write(frame)
	return err
}

func readMsg(r io.Reader) (*message, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxFrame {
		return nil, fmt.Errorf("frame of %d bytes exceeds %d", n, maxFrame)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	m := new(message)
	if err := json.Unmarshal(b, m); err != nil {
		return nil, err
	}
	return m, nil
}
