// Package checkpoint serves `agentbox checkpoint` to a session: a Unix socket the
// launcher listens on, in a directory of its own below /tmp (mode 0700), handed
// into the sandbox read-only at one fixed path (Dir) and named by AGENTBOX_CHECKPOINT.
// A request is a message, text only; the launcher records the working tree as the
// session's next step (shadow.Session.Checkpoint) and answers with its number.
//
// Everything that arrives on the socket is the sandbox's: the server bounds what a
// request may make the host do. One request is read at a time per connection, at
// most maxRequest bytes within readTimeout; at most maxConns connections are open;
// one checkpoint runs at a time, and the next is taken no sooner than the last one
// took (at least minInterval) after it ended, so the host spends at most half its
// time on them; a session takes at most maxCheckpoints, reading at most
// maxSessionBytes of file content in all. Connections are taken from a backlog of
// maxConns at one per acceptGap (internal/pace: the launcher's work is outside the
// session's --cpus). After Stop, nothing is served.
package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/pace"
	"github.com/agentbox/agentbox/internal/termsafe"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/session/leftovers"
)

// Env names the socket inside the sandbox.
const Env = "AGENTBOX_CHECKPOINT"

// Dir is where the socket's directory is bound inside the sandbox (below the
// private /run, which holds agentbox's own), and Sock the socket there.
const (
	Dir  = "/run/agentbox/checkpoint"
	Sock = Dir + "/sock"
)

// The bounds on what the sandbox can make the host do (package comment).
const (
	maxRequest      = 4096
	readTimeout     = 5 * time.Second
	writeTimeout    = 5 * time.Second
	maxConns        = 4
	minInterval     = 250 * time.Millisecond
	maxCheckpoints  = 1000
	maxSessionBytes = int64(4 << 30)
	acceptGap       = 50 * time.Millisecond
)

// The refusals that say "ask again" (Queue): the second ends with the wait.
const (
	refusedUnderWay = "a checkpoint is under way"
	refusedTooSoon  = "too soon after the last checkpoint; try again in "
)

// Result is one checkpoint taken: its step number and the file content read.
type Result struct {
	Step int
	Read int64
}

// Taker records a checkpoint with msg, reading at most budget bytes of content.
type Taker func(msg string, budget int64) (Result, error)

// Server is one session's checkpoint endpoint.
type Server struct {
	dir, sock string
	l         net.Listener
	take      Taker
	now       func() time.Time // time.Now; the tests' own clock (set under state)
	conns     chan struct{}    // a token per open connection
	claim     *leftovers.Lock
	removed   chan struct{} // closed once Stop's removal is done
	served    sync.WaitGroup

	mu      sync.Mutex // held while a checkpoint runs
	state   sync.Mutex // guards what follows
	stopped bool
	next    time.Time // no checkpoint starts before
	count   int
	read    int64
	busy    atomic.Int64 // requests refused as under way (the tests wait on it)
}

// Start listens on a new socket and serves it with take until Stop.
func Start(take Taker) (*Server, error) {
	// Named and claimed as leftovers wants, so that `agentbox gc` removes it
	// after a launcher killed before Stop.
	dir, err := os.MkdirTemp("/tmp", fmt.Sprintf("%s%d-", leftovers.CheckpointPrefix, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("checkpoint endpoint: %w", err)
	}
	s := &Server{dir: dir, sock: filepath.Join(dir, "sock"), take: take, now: time.Now, conns: make(chan struct{}, maxConns), removed: make(chan struct{})}
	if s.claim, err = leftovers.Claim(dir); err == nil {
		s.l, err = pace.Listen(s.sock, maxConns)
	}
	if err != nil {
		os.RemoveAll(dir)
		s.claim.Release()
		return nil, fmt.Errorf("checkpoint endpoint: %w", err)
	}
	s.served.Add(1)
	go s.serve()
	return s, nil
}

// Ops hand the socket's directory in at Dir: a mount point in the private /run,
// covered at once by the directory read-only (connect(2) needs no write access).
func (s *Server) Ops() []mounts.Op {
	if s == nil {
		return nil
	}
	return []mounts.Op{
		{Kind: mounts.Tmpfs, Dest: Dir, Mode: 0o755, Why: "mount point for the checkpoint endpoint"},
		{Kind: mounts.BindRO, Source: s.dir, Dest: Dir, Why: "the checkpoint endpoint (agentbox checkpoint)"},
	}
}

// Grant adds Dir to the plan's path-socket grants, where it has them.
func (s *Server) Grant(p *mounts.Plan) {
	if s != nil && p.DenyPathSockets {
		p.PathSocketGrants = append(p.PathSocketGrants, Dir)
	}
}

// SetEnv points the command's AGENTBOX_CHECKPOINT at the socket, and drops any
// value the environment had (a nested session's, or the host's).
func (s *Server) SetEnv(env []string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, Env+"=") {
			out = append(out, kv)
		}
	}
	if s == nil {
		return out
	}
	return append(out, Env+"="+Sock)
}

// Stop ends the endpoint: no request is taken after it, and it waits for the one
// under way (bounded by the recorder's deadline). The socket, its directory and
// their claim are removed beside what follows (the session's audit and record,
// which no longer need them); Removed waits for that. A second call does nothing.
func (s *Server) Stop() {
	if s == nil {
		return
	}
	s.state.Lock()
	if s.stopped {
		s.state.Unlock()
		return
	}
	s.stopped = true
	s.state.Unlock()
	s.l.Close()
	s.served.Wait()
	go func() {
		defer close(s.removed)
		removeEndpoint(s.dir, s.sock)
		s.claim.Release()
	}()
}

// Removed stops the endpoint if it runs, and returns once its socket, directory
// and claim are gone. Every owner calls it before it exits: a process that ends
// first leaves them for `agentbox gc`.
func (s *Server) Removed() {
	if s == nil {
		return
	}
	s.Stop()
	<-s.removed
}

// removeEndpoint removes the socket and its directory, which holds nothing else
// (mode 0700, this process's): two system calls where os.RemoveAll, which first
// tries the directory as a file and then as an empty one, lists it and removes
// what it lists, takes nine. Anything else found in it falls to RemoveAll.
func removeEndpoint(dir, sock string) {
	if os.Remove(sock) != nil || unix.Rmdir(dir) != nil {
		os.RemoveAll(dir)
	}
}

// isStopped says whether Stop has been called.
func (s *Server) isStopped() bool {
	s.state.Lock()
	defer s.state.Unlock()
	return s.stopped
}

func (s *Server) serve() {
	defer s.served.Done()
	gate := pace.NewGate(acceptGap, maxConns)
	for {
		gate.Wait() // the pace (package comment); a closed listener ends the loop next
		c, err := s.l.Accept()
		if err != nil {
			// Stopped: the listener was closed by Stop. Asked first, since
			// errors.Is walks the error's chain through code that every session
			// would otherwise fault in once, as its endpoint stops.
			if s.isStopped() || errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: no busy loop
			continue
		}
		select {
		case s.conns <- struct{}{}:
		default:
			c.Close() // too many open: the sandbox opens them faster than it waits
			continue
		}
		s.served.Add(1)
		go func() {
			defer s.served.Done()
			defer func() { <-s.conns }()
			defer c.Close()
			s.handle(c)
		}()
	}
}

// handle reads one request and answers it: "ok N" or "refused: WHY", one line.
func (s *Server) handle(c net.Conn) {
	c.SetReadDeadline(time.Now().Add(readTimeout))
	b, err := io.ReadAll(io.LimitReader(c, maxRequest+1))
	var answer string
	switch {
	case err != nil:
		answer = "refused: the request did not arrive whole within " + readTimeout.String()
	case len(b) > maxRequest:
		answer = fmt.Sprintf("refused: the message is longer than %d bytes", maxRequest)
	default:
		answer = s.checkpoint(string(b))
	}
	c.SetWriteDeadline(time.Now().Add(writeTimeout))
	io.WriteString(c, answer+"\n")
}

// checkpoint takes one checkpoint if the bounds let it.
func (s *Server) checkpoint(msg string) string {
	if !s.mu.TryLock() {
		s.busy.Add(1)
		return "refused: " + refusedUnderWay
	}
	defer s.mu.Unlock()
	s.state.Lock()
	now := s.now()
	switch {
	case s.stopped:
		s.state.Unlock()
		return "refused: the session has ended"
	case s.count >= maxCheckpoints:
		s.state.Unlock()
		return fmt.Sprintf("refused: the session took %d checkpoints, the most one may", maxCheckpoints)
	case s.read >= maxSessionBytes:
		s.state.Unlock()
		return "refused: the session's checkpoints read the most file content they may"
	case now.Before(s.next):
		wait := s.next.Sub(now).Round(time.Millisecond)
		s.state.Unlock()
		return "refused: " + refusedTooSoon + wait.String()
	}
	budget := maxSessionBytes - s.read
	s.state.Unlock()
	res, err := s.take(msg, budget)
	s.state.Lock()
	end := s.now()
	s.next = end.Add(max(end.Sub(now), minInterval))
	s.read += res.Read
	s.count++ // a failed checkpoint was host work too: it counts against the cap
	s.state.Unlock()
	if err != nil {
		return "refused: " + oneLine(err.Error())
	}
	return "ok " + strconv.Itoa(res.Step)
}

// oneLine keeps an answer on its line.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if termsafe.Unsafe(r) {
			return '?'
		}
		return r
	}, s)
}
