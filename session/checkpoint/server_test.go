package checkpoint

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestServerBounds: one checkpoint at a time, none sooner than the last one
// took after it, and none once the server stopped (the session ended) — also
// for a request already connected when it stopped.
func TestServerBounds(t *testing.T) {
	release := make(chan struct{})
	n := 0
	s, err := Start(func(msg string, budget int64) (Result, error) {
		n++
		if msg == "slow" {
			<-release
		}
		return Result{Step: n}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The server's clock is the test's: it moves only when the test says, so
	// "right after" stays right after on a loaded machine.
	var clock atomic.Int64
	t0 := time.Now()
	s.state.Lock()
	s.now = func() time.Time { return t0.Add(time.Duration(clock.Load())) }
	s.state.Unlock()
	t.Setenv(Env, s.sock)
	slow := make(chan error, 1)
	go func() { _, err := Request("slow"); slow <- err }()
	for s.mu.TryLock() { // until the slow one holds it
		s.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	if _, err := Request("second"); err == nil || !strings.Contains(err.Error(), "under way") {
		t.Fatalf("a second checkpoint while one runs: %v", err)
	}
	clock.Add(int64(600 * time.Millisecond))
	close(release)
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	// The slow one took 600 ms: the next waits as long after it.
	clock.Add(int64(599 * time.Millisecond))
	if _, err := Request("soon"); err == nil || !strings.Contains(err.Error(), "too soon") || !strings.Contains(err.Error(), "try again in 1ms") {
		t.Fatalf("a checkpoint 599 ms after one that took 600 ms: %v", err)
	}
	s.Stop()
	if _, err := Request("after"); err == nil {
		t.Fatal("a checkpoint after Stop was served")
	}
	if got := s.checkpoint("after"); got != "refused: the session has ended" {
		t.Fatalf("a request under way when the server stopped: %q", got)
	}
	if n != 1 {
		t.Fatalf("%d checkpoints taken, want 1", n)
	}
}
