package checkpoint

import (
	"strings"
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
	time.Sleep(300 * time.Millisecond)
	close(release)
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	// The slow one took over 300 ms: the next waits as long.
	if _, err := Request("soon"); err == nil || !strings.Contains(err.Error(), "too soon") {
		t.Fatalf("a checkpoint right after a slow one: %v", err)
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
