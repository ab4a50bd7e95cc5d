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
	ts := startTestServer(t)
	s, clock := ts.s, &ts.clock
	release := make(chan struct{})
	ts.release.Store(&release)
	slow := ts.slow()
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
	if n := ts.taken.Load(); n != 1 {
		t.Fatalf("%d checkpoints taken, want 1", n)
	}
}

// testServer is a Server whose "slow" checkpoints wait for release to close, on a
// clock of the test's: it moves only when the test says, so "right after" stays
// right after on a loaded machine.
type testServer struct {
	s       *Server
	clock   atomic.Int64
	taken   atomic.Int64
	release atomic.Pointer[chan struct{}]
}

// startTestServer starts one, stopped at the test's end, named by Env.
func startTestServer(t *testing.T) *testServer {
	ts := &testServer{}
	s, err := Start(func(msg string, budget int64) (Result, error) {
		step := ts.taken.Add(1)
		if msg == "slow" {
			<-*ts.release.Load()
		}
		return Result{Step: int(step)}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Removed)
	t0 := time.Now()
	s.state.Lock()
	s.now = func() time.Time { return t0.Add(time.Duration(ts.clock.Load())) }
	s.state.Unlock()
	t.Setenv(Env, s.sock)
	ts.s = s
	return ts
}

// slow requests a "slow" checkpoint and returns once it runs; its error arrives
// on the channel when it was released.
func (ts *testServer) slow() chan error {
	done := make(chan error, 1)
	go func() { _, err := Request("slow"); done <- err }()
	for ts.s.mu.TryLock() { // until the slow one holds it
		ts.s.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	return done
}

// TestQueueWaitsBehindASlowCheckpoint: `agentbox checkpoint` (Queue) sent while a
// slow checkpoint runs waits its turn and is taken after it, where it was refused
// at once ("under way"); a request (Request, as --hook sends) still is; and a queued
// one ends when the session does.
func TestQueueWaitsBehindASlowCheckpoint(t *testing.T) {
	ts := startTestServer(t)
	s, clock := ts.s, &ts.clock
	release := make(chan struct{})
	ts.release.Store(&release)
	slow := ts.slow()
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
	ts.release.Store(&release)
	slow = ts.slow()
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
