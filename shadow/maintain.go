package shadow

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Packing the shadow repository. Recording writes one pack per session that changed
// something (bulk check-in, see stage), so packs pile up; Git itself would repack
// them, but its automatic gc is off (it would run the pre-auto-gc hook and detach).
// maintain repacks under the store's lock, beside a session's command (BeginWalk),
// geometrically: each run merges only the small packs into the next size up, so
// its cost is bounded by what was recorded since the previous run, not by the size
// of the store.
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
	return err != nil
}

// noticeAfter is how long work lasts before noticeStart says what it is, and
// stepEvery how often, from then on, a notice says how far it got.
const (
	noticeAfter = time.Second
	stepEvery   = 2 * time.Second
)

// notice tells s.Progress (a terminal) about one piece of long work: what it is,
// once it has lasted noticeAfter; how far it got, every stepEvery after that; and
// how long it took. Short work prints nothing. A nil *notice prints nothing.
type notice struct {
	w     io.Writer
	what  string
	t0    time.Time
	timer *time.Timer
	mu    sync.Mutex
	shown bool      // the first line is out
	ended bool      // end ran: nothing more is printed
	last  time.Time // when the last line was printed
}

// noticeStart starts the notice of what, when on and s.Progress is set.
func (s *Store) noticeStart(on bool, what string) *notice {
	if !on || s.Progress == nil {
		return nil
	}
	n := &notice{w: s.Progress, what: what, t0: time.Now()}
	n.timer = time.AfterFunc(noticeAfter, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if !n.ended {
			fmt.Fprintf(n.w, "agentbox: %s …\n", n.what)
			n.shown, n.last = true, time.Now()
		}
	})
	return n
}

// step says how many of how many files are done, when the notice is shown and its
// last line is stepEvery old.
func (n *notice) step(done, total int) {
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.shown && !n.ended && time.Since(n.last) >= stepEvery {
		fmt.Fprintf(n.w, "agentbox: %s: %s of %s files\n", n.what, thousands(done), thousands(total))
		n.last = time.Now()
	}
}

// end ends the notice, saying how long the work took if the notice was shown.
func (n *notice) end() {
	if n == nil {
		return
	}
	n.timer.Stop()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.ended = true
	if n.shown {
		fmt.Fprintf(n.w, "agentbox: %s: done in %.1f s\n", n.what, time.Since(n.t0).Seconds())
	}
}

// thousands writes n with commas between groups of three digits.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
