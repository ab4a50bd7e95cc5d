package pace

import (
	"errors"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestListenBacklog: past the backlog, a non-blocking connect gets EAGAIN
// instead of queueing for the launcher to drain.
func TestListenBacklog(t *testing.T) {
	l, err := Listen(filepath.Join(t.TempDir(), "sock"), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	queued := 0
	for i := 0; i < 64; i++ {
		fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(fd)
		err = syscall.Connect(fd, &syscall.SockaddrUnix{Name: l.Addr().String()})
		switch {
		case err == nil:
			queued++
		case !errors.Is(err, syscall.EAGAIN):
			t.Fatalf("connect %d: %v", i, err)
		}
	}
	// The kernel queues one past the backlog.
	if queued > 3 {
		t.Fatalf("%d of 64 connections queued with a backlog of 2", queued)
	}
	if c, err := net.Dial("unix", l.Addr().String()); err == nil {
		c.Close()
		t.Fatal("a connect to a full backlog succeeded")
	}
}

// TestGate: a burst passes at once, then one per gap (counted on the gate's
// schedule, not on a clock: the next due time moves by exactly one gap a caller).
func TestGate(t *testing.T) {
	g := NewGate(time.Hour, 3)
	start := time.Now()
	for i := 0; i < 3; i++ {
		g.Wait()
	}
	if time.Since(start) > 30*time.Minute {
		t.Fatal("the burst waited")
	}
	g.mu.Lock()
	due := g.due
	g.mu.Unlock()
	if ahead := time.Until(due); ahead < 50*time.Minute {
		t.Fatalf("after a burst of 3 the next caller is due in %s, want about an hour", ahead)
	}
}

// TestGateWaitOr: a caller past the burst waits for its turn, and a closed stop
// ends the wait at once.
func TestGateWaitOr(t *testing.T) {
	g := NewGate(time.Hour, 1)
	if !g.WaitOr(nil) {
		t.Fatal("the burst's caller gave up")
	}
	stop := make(chan struct{})
	got := make(chan bool)
	go func() { got <- g.WaitOr(stop) }()
	select {
	case <-got:
		t.Fatal("a caller past the burst did not wait")
	case <-time.After(100 * time.Millisecond):
	}
	close(stop)
	if <-got {
		t.Fatal("a stopped wait reported its turn")
	}
}
