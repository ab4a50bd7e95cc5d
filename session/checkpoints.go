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

// startingCheckpoints is the session's checkpoint endpoint while it starts. Its
// directory, lock and socket are three inodes made in /tmp, work that needs
// nothing of the launch's other steps: it runs beside them, and the launch takes
// the endpoint (wait) where it builds the plan, the first step that needs it.
type startingCheckpoints struct {
	done chan struct{}
	srv  *checkpoint.Server
	c    *checkpoints
	err  error
}

// startCheckpoints starts the session's checkpoint endpoint; none for a session
// that is not recorded, or cannot change the repository (--read-only). Every
// caller stops it (stop), whatever happens to the launch.
func startCheckpoints(p *policy.Policy, rec *record.Recorder) *startingCheckpoints {
	sc := &startingCheckpoints{done: make(chan struct{})}
	if rec == nil || p.ReadOnly {
		close(sc.done)
		return sc
	}
	sc.c = &checkpoints{rec: rec}
	go func() {
		defer close(sc.done)
		sc.srv, sc.err = checkpoint.Start(sc.c.take)
	}()
	return sc
}

// wait returns the endpoint and its taker, nil when there is none. As with the
// record itself, a failure is a warning: the session runs without it.
func (sc *startingCheckpoints) wait(stderr io.Writer) (*checkpoint.Server, *checkpoints) {
	<-sc.done
	if sc.err != nil {
		fmt.Fprintf(stderr, "agentbox: warning: %v: agentbox checkpoint will not work in this session\n", sc.err)
		return nil, nil
	}
	if sc.srv == nil {
		return nil, nil
	}
	return sc.srv, sc.c
}

// stop ends the endpoint once it has started (checkpoint.Server.Stop: a second
// call does nothing). Its files are removed beside what follows (removed).
func (sc *startingCheckpoints) stop() {
	<-sc.done
	sc.srv.Stop()
}

// removed stops the endpoint if it runs and waits until its files are gone; a nil
// sc had none.
func (sc *startingCheckpoints) removed() {
	if sc != nil {
		<-sc.done
		sc.srv.Removed()
	}
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
