package audit

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"

	"github.com/agentbox/agentbox/internal/treewatch"
)

// Listing working-tree directories ahead of the scan. The scan itself stays one
// sequential walk, in the same order, with the same bounds and the same messages:
// only the system calls — open, getdents and one fstatat per entry, most of a big
// tree's scan — move to a few goroutines that list the
// subdirectories of each directory as soon as the scan has seen them. The scan then
// takes each listing as if it had read it itself (readDirStat), replaying the
// listing's batches against its own entry bound. A worker lists and lstat's a whole
// directory itself, so the cores do not wait on each other at every directory.
//
// A worker that has listed a directory whole schedules its subdirectories itself
// (prefetchConfig.ahead), so that the workers go down the tree while the scan is
// busy elsewhere — the top's .git (its configs, hooks and index) on the bench's
// tree, when only src/ was listed and its 200 subdirectories waited for the scan
// to reach src/ (docs/performance.md, "the launch walk on 20,000 files"). It
// schedules exactly what tree would: not below MaxDepth, not ".git", not a kernel
// mount, and nothing below a directory holding a .git (a nested repository, whose
// entries the scan lists without lstat's): those the scan schedules itself.
//
// Nothing is read before the scan's clock (the caller schedules only from tree,
// after Scan read it, and the workers only below what it scheduled), and every
// worker is done before Scan returns, so the walk stands for the tree exactly as a
// sequential one did. What the workers read
// beyond the scan's needs (a bound hit, a depth cut) is dropped; what they may read
// in all is bounded by MaxEntries too, so a hostile tree cannot make them hold more
// than the scan would.

// prefetchWorkers is how many goroutines list directories: more than the cores,
// since each spends most of its time in system calls.
const prefetchWorkers = 4

// listing is one directory as a worker read it: the result of each ReadDir batch in
// order, then the lstat of every entry read.
type listing struct {
	done    chan struct{}
	openErr error
	ents    []os.DirEntry // in the order read, or sorted when sorted
	batches []int         // len of each ReadDir batch, in order
	lastErr error         // the error that ended the listing (io.EOF at its end); nil when the worker stopped at its bound
	stats   []entryStat   // stats[i] is ents[i]'s, when asked for
	statOK  bool
	sorted  bool           // ents (and stats) are sorted by name: the listing is whole
	stat    bool           // the entries were to be lstat'ed
	watched *treewatch.Dir // the launch watch's mark on the directory, placed before it was read
	subdirs []subdirID     // with stats: the subdirectories' identities
	links   []linkID       // with stats: the entries with more than one name
}

type prefetcher struct {
	jobs chan prefetchJob
	wg   sync.WaitGroup
	max  int          // MaxEntries: neither one listing nor all of them read more
	read atomic.Int64 // entries read by all workers
	// mu guards pending and closed: the scan and, with ahead, the workers
	// schedule.
	mu      sync.Mutex
	pending map[string]*listing
	closed  bool // stop closed jobs: nothing is scheduled any more
	ahead   bool
	// maxDepth and pseudo are the scan's, for ahead: the depth below which tree
	// schedules no subdirectory, and the kernel mounts it does not enter.
	maxDepth int
	pseudo   map[string]string
	launch   *Launch // marks each directory before it is read (nil: no watch)
	// held opens a directory of a held scan (the scanner's openPath,
	// audit_held_linux.go); nil for a scan by path.
	held func(string, int) (int, error)
	// root is "/", opened once for the workers' opens instead of once a
	// directory (safepath.Open's), when rooted; else each opens its own.
	root   int
	rooted bool
	// rings lstat the entries of the directories the workers and the scan list
	// (audit_uring_linux.go); closed by stop.
	rings ringPool
}

type prefetchJob struct {
	dir   string
	stat  bool
	depth int // tree's depth of dir
	l     *listing
}

// prefetchConfig is what a scan tells its prefetcher.
type prefetchConfig struct {
	maxEntries int
	launch     *Launch                        // marks each directory before it is read (nil: no watch)
	held       func(string, int) (int, error) // the scanner's openPath for a held scan, nil for a scan by path
	big        bool                           // the tree is known to hold ringAfterEntries entries or more: rings at once
	ahead      bool                           // workers schedule the subdirectories of what they list
	maxDepth   int                            // with ahead: the scan's MaxDepth
	pseudo     map[string]string              // with ahead: the scan's kernel mounts, not entered
}

// noPrefetch makes Scan list every directory itself (tests compare the two).
var noPrefetch bool

// newPrefetcher starts the workers. A held scan's opens (c.held) already start at
// the held descriptor. With c.big, the rings are made from the first directory
// on, not once ringAfterEntries entries are listed.
func newPrefetcher(c prefetchConfig) *prefetcher {
	if noPrefetch {
		return nil
	}
	p := &prefetcher{jobs: make(chan prefetchJob, 1<<14), max: c.maxEntries, pending: map[string]*listing{}, launch: c.launch, held: c.held,
		ahead: c.ahead && !noAhead, maxDepth: c.maxDepth, pseudo: c.pseudo}
	p.rings.max, p.rings.listed = prefetchWorkers, &p.read
	if c.big {
		p.rings.listed = nil
	}
	if p.held == nil {
		if fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			p.root, p.rooted = fd, true
		}
	}
	for range prefetchWorkers {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for j := range p.jobs {
				p.list(j)
			}
		}()
	}
	return p
}

// noAhead makes only the scan schedule (tests compare the two).
var noAhead bool

// scheduledAhead counts the directories workers scheduled (for the tests).
var scheduledAhead atomic.Int64

// schedule asks for dir, at tree's depth, to be listed (and its entries lstat'ed
// when stat), unless it is already, or the queue is full: then the scan lists it
// itself. It says whether it was scheduled by this call.
func (p *prefetcher) schedule(dir string, stat bool, depth int) bool {
	if p == nil || p.read.Load() >= int64(p.max) {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.pending[dir] != nil {
		return false
	}
	l := &listing{done: make(chan struct{})}
	select {
	case p.jobs <- prefetchJob{dir: dir, stat: stat, depth: depth, l: l}:
		p.pending[dir] = l
		return true
	default:
		return false
	}
}

// take returns the listing of dir scheduled with stat, waiting for it; nil when
// none was (or it was scheduled with another stat, or the workers stopped at their
// bound before it): the caller reads dir itself.
func (p *prefetcher) take(dir string, stat bool) *listing {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	l := p.pending[dir]
	delete(p.pending, dir)
	p.mu.Unlock()
	if l == nil {
		return nil
	}
	<-l.done
	if l.stat != stat || l.openErr == nil && l.batches == nil {
		return nil
	}
	return l
}

// stop waits for every worker: nothing reads the tree after the scan.
func (p *prefetcher) stop() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.closed = true
	close(p.jobs)
	p.mu.Unlock()
	p.wg.Wait()
	p.rings.close()
	if p.rooted {
		unix.Close(p.root)
	}
}

// list reads one directory the way readDirBatches does, stopping when this listing
// or all of them reach the bound.
func (p *prefetcher) list(j prefetchJob) {
	l := j.l
	defer close(l.done)
	if p.read.Load() >= int64(p.max) {
		return // no batches: the scan reads it itself, if it still wants it
	}
	l.stat = j.stat
	fd, err := p.open(j.dir)
	if err != nil {
		l.openErr = err
		return
	}
	defer unix.Close(fd)
	l.watched = p.launch.watchDir(fd)
	r := &direntReader{fd: fd} // audit_dirents_linux.go
	for {
		batch, err := r.next(4096)
		l.ents = appendBatch(l.ents, batch) // audit_walk_linux.go
		l.batches = append(l.batches, len(batch))
		total := p.read.Add(int64(len(batch)))
		if errors.Is(err, io.EOF) || err == nil && len(batch) == 0 {
			l.lastErr = io.EOF
			break
		}
		if err != nil {
			l.lastErr = err
			break
		}
		if len(l.ents) >= p.max {
			break // lastErr nil: the scan's own bound stops it at this batch or before
		}
		if total >= int64(p.max) {
			// All listings together reached the bound, not this one: the scan reads
			// it itself, if it still wants it.
			l.ents, l.batches = nil, nil
			return
		}
	}
	if l.lastErr != nil {
		// Sorted before the lstats, which are then written in name order: the
		// sort moves the entries alone, not their stats beside them.
		sortNames(l.ents)
		l.sorted = true
	}
	if j.stat {
		l.stats = make([]entryStat, len(l.ents))
		l.subdirs, l.links, l.statOK = statAll(fd, l.ents, l.stats, 1, &p.rings)
	}
	if p.ahead && errors.Is(l.lastErr, io.EOF) {
		p.scheduleBelow(j, l.ents)
	}
}

// scheduleBelow schedules the subdirectories of j's directory, whose whole
// listing is ents (sorted), as tree would schedule them once it reached it:
// below MaxDepth, not ".git" nor a kernel mount, and none at all when the
// directory holds a .git (tree lists a nested repository's subdirectories
// without lstat's, and schedules them itself). Before the listing is done, so
// that the scan, which takes it first, finds them scheduled.
func (p *prefetcher) scheduleBelow(j prefetchJob, ents []os.DirEntry) {
	if j.depth >= p.maxDepth {
		return
	}
	for _, e := range ents {
		if e.Name() == ".git" {
			return
		}
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		sub := filepath.Join(j.dir, e.Name())
		if _, ok := p.pseudo[sub]; !ok && p.schedule(sub, j.stat, j.depth+1) {
			scheduledAhead.Add(1)
		}
	}
}

// ringPool is the prefetcher's rings, nil without one (the walk uses fstatat).
func (p *prefetcher) ringPool() *ringPool {
	if p == nil {
		return nil
	}
	return &p.rings
}

// open is the held scan's own open (beneath the held descriptor), or else
// safepath.Open of the absolute path dir: the same resolution from the same root,
// which the launcher never changes.
func (p *prefetcher) open(dir string) (int, error) {
	if p.held != nil {
		return p.held(dir, unix.O_RDONLY|unix.O_DIRECTORY)
	}
	if !p.rooted || !strings.HasPrefix(dir, "/") {
		return safepath.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY)
	}
	return safepath.OpenBeneath(p.root, dir, unix.O_RDONLY|unix.O_DIRECTORY)
}

// sortListing sorts ents by name, and stats (when not nil) with them: a
// listing a worker lstat'ed before it was whole (cut by the entry bound), which
// replay sorts.
func sortListing(ents []os.DirEntry, stats []entryStat) {
	if stats == nil {
		sortNames(ents)
		return
	}
	sort.Sort(byName{ents, stats})
}

type byName struct {
	ents  []os.DirEntry
	stats []entryStat
}

func (b byName) Len() int           { return len(b.ents) }
func (b byName) Less(i, j int) bool { return entryName(b.ents[i]) < entryName(b.ents[j]) }
func (b byName) Swap(i, j int) {
	b.ents[i], b.ents[j] = b.ents[j], b.ents[i]
	b.stats[i], b.stats[j] = b.stats[j], b.stats[i]
}

// sortNames sorts a listing by name. Names are unique in a directory, so the
// order is the one sort.Slice gave; slices.SortFunc's comparisons are direct
// calls, where sort.Slice's go through a closure and a swapper by reflection.
func sortNames(ents []os.DirEntry) {
	slices.SortFunc(ents, func(a, b os.DirEntry) int { return strings.Compare(entryName(a), entryName(b)) })
}

// entryName is e's name: a listing's entries are dirents (audit_dirents_linux.go),
// whose name is read without a call through the interface.
func entryName(e os.DirEntry) string {
	if d, ok := e.(dirent); ok {
		return d.Name()
	}
	return e.Name()
}

// replay is readDirBatches over a listing a worker read: the same entry count, bound
// and messages as if the scan had read the batches itself.
func (s *scanner) replay(l *listing, dir string) ([]os.DirEntry, []entryStat, bool) {
	n := 0
	for i, b := range l.batches {
		n += b
		s.entries += b
		last := i == len(l.batches)-1
		if last && l.lastErr != nil {
			if !errors.Is(l.lastErr, io.EOF) {
				s.skip(dir, "cannot list directory: %v", l.lastErr)
			}
			break
		}
		if s.entries >= s.opt.MaxEntries {
			s.stopped = true
			s.skip(dir, "walk stopped after %d entries while listing this directory; the rest of it and of the tree were not searched", s.entries)
			break
		}
	}
	ents, stats := l.ents[:n], l.stats
	if stats != nil {
		stats = stats[:n]
	}
	if !l.sorted || n < len(l.ents) {
		sortListing(ents, stats)
	}
	return ents, stats, l.statOK
}
