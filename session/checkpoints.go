package session

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/session/checkpoint"
	"github.com/agentbox/agentbox/session/record"
)

// checkpoints takes the checkpoints the sandbox asks for (session/checkpoint):
// from the audit's watch, the walk of what changed since launch
// (hostaudit.Auditor.CheckpointWalk), then the recorder's step.
type checkpoints struct {
	rec *record.Recorder
	mu  sync.Mutex
	pre *prelaunch // set once the host work before the command started
}

// startCheckpoints starts the session's checkpoint endpoint; nil for a session
// that is not recorded, or cannot change the repository (--read-only). As with
// the record itself, a failure is a warning: the session runs without it.
func startCheckpoints(stderr io.Writer, p *policy.Policy, rec *record.Recorder) (*checkpoint.Server, *checkpoints) {
	if rec == nil || p.ReadOnly {
		return nil, nil
	}
	c := &checkpoints{rec: rec}
	srv, err := checkpoint.Start(c.take)
	if err != nil {
		fmt.Fprintf(stderr, "agentbox: warning: %v: agentbox checkpoint will not work in this session\n", err)
		return nil, nil
	}
	return srv, c
}

// started hands over the host work the command waits for.
func (c *checkpoints) started(pre *prelaunch) {
	if c != nil {
		c.mu.Lock()
		c.pre = pre
		c.mu.Unlock()
	}
}

func (c *checkpoints) take(msg string, budget int64) (checkpoint.Result, error) {
	c.mu.Lock()
	pre := c.pre
	c.mu.Unlock()
	if pre == nil {
		return checkpoint.Result{}, errors.New("the session has not started")
	}
	<-pre.done // the command waited for it already
	if pre.err != nil {
		return checkpoint.Result{}, errors.New("the session's start was not recorded")
	}
	st, err := c.rec.Checkpoint(msg, pre.aud.CheckpointWalk(), budget)
	return checkpoint.Result{Step: st.N, Read: st.ReadBytes}, err
}
