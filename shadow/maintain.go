package shadow

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Packing the shadow repository. Recording writes one pack per session that changed
// something (bulk check-in, see stage), so packs pile up; Git itself would repack
// them, but its automatic gc is off (it would run the pre-auto-gc hook and detach).
// maintain repacks under the store's lock, geometrically: each run merges only the
// small packs into the next size up, so its cost is bounded by what was recorded
// since the previous run, not by the size of the store.
const (
	maxPacks = 16   // more packs than this: repack
	maxLoose = 6700 // Git's gc.auto: estimated loose objects beyond this: repack
)

// maintain repacks when the shadow repository has too many packs or loose objects
// (a store written by an older agentbox). The caller holds the lock.
func (s *Store) maintain() error {
	packs, _ := filepath.Glob(filepath.Join(s.Dir, "objects", "pack", "*.pack"))
	if len(packs) <= maxPacks && s.looseEstimate() <= maxLoose {
		return nil
	}
	// --geometric=2: packs are merged so that each is at least twice the next
	// smaller; loose objects are packed too, and -d removes what became redundant.
	if _, err := s.git.run(nil, "repack", "-d", "-q", "--geometric=2"); err != nil {
		return fmt.Errorf("shadow: repack %s: %w", s.Dir, err)
	}
	return nil
}

// looseEstimate counts the loose objects of one of the 256 fan-out directories and
// scales it, as Git's gc.auto does.
func (s *Store) looseEstimate() int {
	d, err := os.Open(filepath.Join(s.Dir, "objects", "17"))
	if err != nil {
		return 0
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	n := 0
	for _, name := range names {
		if len(name) == 38 && !strings.ContainsRune(name, '.') {
			n++
		}
	}
	return n * 256
}

// firstRecord reports whether the shadow repository has never staged the work
// tree (no index yet): the record reads and stores every file.
func (s *Store) firstRecord() bool {
	_, err := os.Lstat(filepath.Join(s.Dir, "index"))
	return err != nil && s.Progress != nil
}

// noticeAfter is how long work lasts before noticeStart says what it is.
const noticeAfter = time.Second

// noticeStart says on s.Progress (a terminal) what long work is going on, once it
// has lasted a second, and then how long it took; short work prints nothing. The
// returned function ends the notice.
func (s *Store) noticeStart(on bool, what string) func() {
	if !on {
		return func() {}
	}
	w := s.Progress
	t0 := time.Now()
	done := make(chan struct{})
	shown := make(chan bool, 1)
	go func() {
		select {
		case <-done:
			shown <- false
		case <-time.After(noticeAfter):
			fmt.Fprintf(w, "agentbox: %s …\n", what)
			shown <- true
		}
	}()
	return func() {
		close(done)
		if <-shown {
			fmt.Fprintf(w, "agentbox: %s: done in %.1f s\n", what, time.Since(t0).Seconds())
		}
	}
}
