package bench

import (
	"os"
	"testing"
	"time"
)

// TestExecOnceCountsOrphans: what a launch leaves running when its first process
// exits (as agentbox's raw init outlives agentbox) is counted in the launch's CPU
// time, and is gone when execOnce returns.
func TestExecOnceCountsOrphans(t *testing.T) {
	if err := adoptOrphans(); err != nil {
		t.Fatal(err)
	}
	e := &env{repo: t.TempDir()}
	// The orphan spins in the shell for a fixed amount of work; its parent exits at
	// once.
	spin := `(i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; :) >/dev/null 2>&1 & exit 0`
	s, err := e.execOnce("/bin/sh", []string{"-c", spin}, os.Environ(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.CPU < 20*time.Millisecond {
		t.Errorf("CPU %v: the orphan's spin is not counted", s.CPU)
	}
	if testing.Verbose() {
		t.Logf("CPU %v", s.CPU)
	}
	if left := children(); len(left) != 0 {
		t.Errorf("children left after execOnce: %v", left)
	}
}
