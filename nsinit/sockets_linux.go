package nsinit

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/nsinit/protocol"
)

// takeListeners hands the listening sockets that came with m to their takers: the
// proxy's first (plan.Proxy, opts.Listener), then one per plan.HostPorts
// (opts.HostPorts). A descriptor nobody asked for, and every one of a message
// that does not carry exactly what the plan asked for, is closed.
func takeListeners(m *protocol.Message, plan mounts.Plan, opts Options) {
	want := len(plan.HostPorts)
	if plan.Proxy != "" {
		want++
	}
	fds := m.Fds
	if len(fds) != want {
		closeFds(fds)
		return
	}
	if plan.Proxy != "" {
		f := os.NewFile(uintptr(fds[0]), "proxy listener "+plan.Proxy)
		if opts.Listener != nil {
			opts.Listener(f)
		} else {
			f.Close()
		}
		fds = fds[1:]
	}
	if len(fds) == 0 {
		return
	}
	files := make([]*os.File, len(fds))
	for i, fd := range fds {
		files[i] = os.NewFile(uintptr(fd), "--host-port listener")
	}
	if opts.HostPorts == nil {
		for _, f := range files {
			f.Close()
		}
		return
	}
	opts.HostPorts(files)
}

func closeFds(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// socketBroker asks the init for sockets of the sandbox's network namespace
// (protocol.MsgSocket, --publish) on behalf of the launcher's relays. Requests go
// through the launch's loop, which alone writes to the control socket; answers come
// back in order, and every one of them is as good as another, so the oldest waiting
// request gets the next.
type socketBroker struct {
	reqs    chan chan *os.File
	done    chan struct{}
	pending []chan *os.File
}

// socketWait bounds how long a relay waits for the init's answer.
const socketWait = 5 * time.Second

// maxPendingSockets bounds the requests in flight; more wait in get.
const maxPendingSockets = 64

var errSessionEnded = errors.New("the session has ended")

func newSocketBroker() *socketBroker {
	return &socketBroker{reqs: make(chan chan *os.File), done: make(chan struct{})}
}

// get returns a new socket from the init; safe from any goroutine but the loop's.
func (b *socketBroker) get() (*os.File, error) {
	ch := make(chan *os.File, 1)
	timer := time.NewTimer(socketWait)
	defer timer.Stop()
	select {
	case b.reqs <- ch:
	case <-b.done:
		return nil, errSessionEnded
	case <-timer.C:
		return nil, errors.New("the sandbox's init did not answer in time")
	}
	select {
	case f := <-ch:
		if f == nil {
			return nil, errors.New("the sandbox's init made no socket")
		}
		return f, nil
	case <-timer.C:
		// The request is in flight: its answer (or end's nil) comes later.
		go func() {
			if f := <-ch; f != nil {
				f.Close()
			}
		}()
		return nil, errors.New("the sandbox's init did not answer in time")
	}
}

// ask sends the init one request for ch (the loop's side). Past the bound of
// requests in flight, or when the write fails, ch gets nil.
func (b *socketBroker) ask(conn initConn, ch chan *os.File) {
	if len(b.pending) >= maxPendingSockets || conn.write(&protocol.Message{Type: protocol.MsgSocket}) != nil {
		ch <- nil
		return
	}
	b.pending = append(b.pending, ch)
}

// answer gives the socket that came with m (none: a refusal) to the oldest request.
// It is made non-blocking here: the init's copy went out blocking.
func (b *socketBroker) answer(m *protocol.Message) {
	var f *os.File
	if len(m.Fds) > 0 {
		if len(b.pending) > 0 && unix.SetNonblock(m.Fds[0], true) == nil {
			f = os.NewFile(uintptr(m.Fds[0]), "publish socket")
			m.Fds = m.Fds[1:]
		}
		closeFds(m.Fds)
	}
	if len(b.pending) == 0 {
		if f != nil {
			f.Close()
		}
		return
	}
	ch := b.pending[0]
	b.pending = b.pending[1:]
	ch <- f // buffered, and answered once
}

// end refuses every request still waiting, and those to come.
func (b *socketBroker) end() {
	close(b.done)
	for _, ch := range b.pending {
		ch <- nil
	}
	b.pending = nil
}
