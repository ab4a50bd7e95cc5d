// Package flock takes a flock on a file, waiting at most a given time:
// the one bounded wait behind agentbox's per-repository locks (the audit's turns,
// the shadow store), so that a lock a stuck launcher holds never stops later
// launches for ever.
package flock

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Wait takes an exclusive flock on f, retrying with a growing pause (up to 100 ms)
// until it has it or d has passed.
func Wait(f *os.File, d time.Duration) error { return waitFor(f, unix.LOCK_EX, d) }

// WaitShared is Wait for a shared flock: a reader's, which waits for a writer's
// exclusive one.
func WaitShared(f *os.File, d time.Duration) error { return waitFor(f, unix.LOCK_SH, d) }

func waitFor(f *os.File, how int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil || !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("held by another agentbox for more than %s", d)
		}
		time.Sleep(wait)
	}
}
