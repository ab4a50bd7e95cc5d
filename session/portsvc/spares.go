package portsvc

import (
	"context"
	"os"
	"sync"
)

// maxSpares is how many sockets of the sandbox's network namespace the launcher
// keeps made ahead for --publish, so that a connection need not wait for the
// init's round trip. They are unconnected: the sandbox sees nothing of them.
const maxSpares = 2

// spares are those sockets; the zero value is empty and ready.
type spares struct {
	mu      sync.Mutex
	files   []*os.File
	filling bool
	closed  bool
}

// take returns a spare, and has the spares made up again; with none left, a socket
// from get.
func (s *spares) take(ctx context.Context, get func() (*os.File, error)) (*os.File, error) {
	s.mu.Lock()
	var f *os.File
	if n := len(s.files); n > 0 {
		f, s.files = s.files[n-1], s.files[:n-1]
	}
	s.mu.Unlock()
	go s.refill(ctx, get)
	if f != nil {
		return f, nil
	}
	return get()
}

// refill asks get for sockets until there are maxSpares; one refill runs at a
// time, and none after close.
func (s *spares) refill(ctx context.Context, get func() (*os.File, error)) {
	s.mu.Lock()
	if s.filling || s.closed {
		s.mu.Unlock()
		return
	}
	s.filling = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.filling = false
		s.mu.Unlock()
	}()
	for ctx.Err() == nil {
		s.mu.Lock()
		full := len(s.files) >= maxSpares || s.closed
		s.mu.Unlock()
		if full {
			return
		}
		f, err := get()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			f.Close()
			return
		}
		s.files = append(s.files, f)
		s.mu.Unlock()
	}
}

// close closes the spares, and those a refill in flight brings later.
func (s *spares) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, f := range s.files {
		f.Close()
	}
	s.files = nil
}
