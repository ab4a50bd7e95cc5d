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

// TestQueueWaitsBehindASlowCheckpoint: `agentbox checkpoint` (Queue) sent while a
// slow checkpoint runs waits its turn and is taken after it, where it was refused
// at once ("under way"); a request (Request, as --hook sends) still is; and a queued
// one ends when the session does.
func TestQueueWaitsBehindASlowCheckpoint(t *testing.T) {
	release := make(chan struct{})
	var n atomic.Int64
	s, err := Start(func(msg string, budget int64) (Result, error) {
		step := n.Add(1)
		if msg == "slow" {
			<-release
		}
		return Result{Step: int(step)}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
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
	type answer struct {
		step int
		err  error
	}
	queued := make(chan answer, 1)
	go func() { step, err := Queue("queued"); queued <- answer{step, err} }()
	for s.busy.Load() == 0 { // until it was refused as under way at least once
		time.Sleep(time.Millisecond)
	}
	if _, err := Request("hook"); err == nil || !strings.Contains(err.Error(), "under way") {
		t.Errorf("a request while one runs: %v, want refused as under way", err)
	}
	// The queued one is then told it is too soon (minInterval after the slow one,
	// by the server's clock), and is taken once the clock has passed that.
	close(release)
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	clock.Add(int64(time.Second))
	if a := <-queued; a.err != nil || a.step != 2 {
		t.Fatalf("the queued checkpoint: step %d, %v; want step 2", a.step, a.err)
	}

	// A queued request ends with the session.
	clock.Add(int64(time.Second))
	release = make(chan struct{})
	go func() { _, err := Request("slow"); slow <- err }()
	for s.mu.TryLock() {
		s.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	busy := s.busy.Load()
	go func() { step, err := Queue("queued"); queued <- answer{step, err} }()
	for s.busy.Load() == busy {
		time.Sleep(time.Millisecond)
	}
	stopped := make(chan struct{})
	go func() { s.Stop(); close(stopped) }()
	if a := <-queued; a.err == nil {
		t.Errorf("a request queued when the session ended was taken: step %d", a.step)
	}
	close(release)
	<-slow
	<-stopped
}
