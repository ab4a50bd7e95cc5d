package audit

import (
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/uringstat"
)

// The walk's lstats through io_uring. On this machine a system call's trap is
// most of an fstatat's cost; IORING_OP_STATX takes a directory's entries a ring's
// worth at a time, one io_uring_enter each (docs/performance.md, "The launch
// walk's lstats through io_uring"). The answers are the fstatat's: the same
// directory descriptor, AT_SYMLINK_NOFOLLOW|AT_NO_AUTOMOUNT (what fstatat adds),
// and the fields entryStat, subdirID and linkID keep. Whatever the ring does not
// answer whole — a name that is not one component, an entry whose statx failed or
// lacks a field, a ring that failed — is lstat'ed by fstatat as before, so an
// entry's error is always fstatat's own.

// statxMask is what the walk reads of a statx: the type and mode, the inode, the
// change time and the link count (the device is always given).
const statxMask = unix.STATX_TYPE | unix.STATX_MODE | unix.STATX_INO | unix.STATX_CTIME | unix.STATX_NLINK

// ringEntries is one ring's batch: 64 answers (16 KB) a ring, small enough that
// its fresh memory costs little, big enough that a directory of the scale tree
// is one or two system calls.
const ringEntries = 64

// ringMinEntries: fewer entries are lstat'ed by fstatat, as handing them to the
// ring's kernel workers costs more than the traps saved.
const ringMinEntries = 4

// ringAfterEntries: a scan makes its first ring only once its workers have listed
// this many entries. A ring's setup and teardown cost 150–300 µs here (more than
// a hundred fstatat's), which a small repository's walk or an end scan that
// re-reads a few directories would never earn back.
const ringAfterEntries = 4096

// noRing makes the walk lstat by fstatat only (tests compare the two).
var noRing bool

// newRing makes a ring; the tests make it fail.
var newRing = uringstat.New

// ringsMade counts the rings made, for the tests.
var ringsMade atomic.Int64

// statRing is one ring and the names of its current batch.
type statRing struct {
	ring  *uringstat.Ring
	names []*byte
}

// ringPool hands out up to max rings, one per goroutine at a time; a scan's
// rings are closed when its prefetcher stops, before Scan returns.
type ringPool struct {
	mu      sync.Mutex
	free    []*statRing
	made    int
	max     int
	refused bool // io_uring_setup failed: the walk uses fstatat
	// listed is the entries the scan's workers listed so far (nil: no
	// threshold): no ring before ringAfterEntries.
	listed *atomic.Int64
	// answered counts the entries a ring answered (the tests check the rings
	// were used).
	answered atomic.Int64
}

// get returns a ring, or nil: no io_uring here, or all are in use.
func (p *ringPool) get() *statRing {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		r := p.free[n-1]
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return r
	}
	if p.refused || p.made >= p.max || p.made == 0 && p.listed != nil && p.listed.Load() < ringAfterEntries {
		p.mu.Unlock()
		return nil
	}
	// The ring is counted before it is made, and made without the lock: the
	// goroutines that start together (a launch scan's workers, each wanting its
	// ring at once) set theirs up side by side, 150–300 µs each here, instead of
	// one after the other behind the lock.
	p.made++
	p.mu.Unlock()
	r, err := newRing(ringEntries)
	if err != nil {
		p.mu.Lock()
		p.made--
		p.refused = true
		p.mu.Unlock()
		return nil
	}
	ringsMade.Add(1)
	return &statRing{ring: r, names: make([]*byte, 0, r.Entries())}
}

// put returns r; a ring that failed is closed instead.
func (p *ringPool) put(r *statRing, failed bool) {
	if failed {
		r.ring.Close()
		p.mu.Lock()
		p.made--
		p.refused = true
		p.mu.Unlock()
		return
	}
	p.mu.Lock()
	p.free = append(p.free, r)
	p.mu.Unlock()
}

// close closes every ring; none is in use.
func (p *ringPool) close() {
	if p == nil {
		return
	}
	for _, r := range p.free {
		r.ring.Close()
	}
	p.free = nil
}

// statRange lstat's ents[lo:hi] of the directory fd into stats through a ring
// when it can, else by fstatat; ok is false when an entry could not be lstat'ed.
func (p *ringPool) statRange(fd int, ents []os.DirEntry, stats []entryStat, lo, hi int, f *statFound) bool {
	var r *statRing
	if !noRing && hi-lo >= ringMinEntries {
		r = p.get()
	}
	if r == nil {
		return statByFstatat(fd, ents, stats, lo, hi, f)
	}
	ok := true
	for b := lo; b < hi; b += r.ring.Entries() {
		e := min(b+r.ring.Entries(), hi)
		r.names = r.names[:0]
		for _, ent := range ents[b:e] {
			r.names = append(r.names, cName(ent))
		}
		out, errs, err := r.ring.Lstatx(fd, r.names, statxMask)
		if err != nil {
			p.put(r, true)
			return statByFstatat(fd, ents, stats, b, hi, f) && ok
		}
		answered, cancelled := len(out), false
		for i := range out {
			// ECANCELED is no statx's: io-wq could not start a worker (the
			// user's RLIMIT_NPROC, a pids cgroup). It then retries for about 50
			// ms a batch before cancelling, every batch: the ring is done.
			cancelled = cancelled || errs[i] == unix.ECANCELED
			if errs[i] != nil || out[i].Mask&statxMask != statxMask {
				ok = statByFstatat(fd, ents, stats, b+i, b+i+1, f) && ok
				answered--
				continue
			}
			x := &out[i]
			f.add(ents[b+i], &stats[b+i], uint32(x.Mode), x.Ino, x.Ctime.Sec*1e9+int64(x.Ctime.Nsec), unix.Mkdev(x.Dev_major, x.Dev_minor), uint64(x.Nlink))
		}
		p.answered.Add(int64(answered))
		if cancelled {
			p.put(r, true)
			return statByFstatat(fd, ents, stats, e, hi, f) && ok
		}
	}
	clear(r.names)
	p.put(r, false)
	return ok
}

// cName is the entry's name as the kernel reads it, NUL-terminated: a dirent's
// name is followed by getdents64's NUL in the string it was cut from (fill checks
// it); any other entry's name is nil, which the ring never submits.
func cName(e os.DirEntry) *byte {
	d, ok := e.(dirent)
	if !ok {
		return nil
	}
	return d.p
}
