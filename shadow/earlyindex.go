package shadow

import (
	"path/filepath"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// earlyIndex is the shadow index opened, mapped and its entries' layout read
// (openIndex, indexLayout) on a goroutine of its own while stageWalk tells what
// changed from the walk (the stage state, changedPaths, price), which leaves the
// second core idle; the staging in place then takes it (Store.takeIndex) instead
// of opening the index after those steps. Nothing else reads it; whoever does not
// take it drops it.
type earlyIndex struct {
	done    chan struct{}
	ix      *mappedIndex
	layout  indexLayout
	release func() // the layout's mapping
	err     error  // openIndex's or indexLayout's; the others are read after done
	taken   bool
}

// openIndexEarly starts opening the index beside the caller's next steps. The
// caller holds the store's lock (no one else writes the index meanwhile) and
// drops the result on every path.
func (s *Store) openIndexEarly() *earlyIndex {
	e := &earlyIndex{done: make(chan struct{}), release: func() {}}
	go func() {
		defer close(e.done)
		if e.ix, e.err = openIndex(filepath.Join(s.Dir, "index")); e.err != nil {
			return
		}
		st := e.ix.st
		e.layout, e.release, e.err = s.indexLayout(e.ix.b, &st)
	}()
	return e
}

// drop releases what the staging did not take, on a goroutine: an unmap costs a
// TLB shootdown, which nothing waits for. Harmless on nil.
func (e *earlyIndex) drop() {
	if e == nil {
		return
	}
	<-e.done
	if e.taken || e.ix == nil {
		return
	}
	ix, release := e.ix, e.release
	go func() {
		ix.close()
		release()
	}()
}

// takeIndex returns the index at indexPath open and mapped, with its layout and
// the layout's release: the early one (s.early) when it is still the file at
// indexPath (the same inode, size, change and modification times as when it was
// mapped), else opened now. The caller owns what it returns.
func (s *Store) takeIndex(indexPath string) (*mappedIndex, indexLayout, func(), error) {
	if e := s.early; e != nil {
		<-e.done
		var st unix.Stat_t
		if e.err == nil && !e.taken && unix.Lstat(indexPath, &st) == nil && sameFile(&st, &e.ix.st) {
			e.taken = true
			earlyTaken.Add(1)
			return e.ix, e.layout, e.release, nil
		}
	}
	ix, err := openIndex(indexPath)
	if err != nil {
		return nil, indexLayout{}, nil, err
	}
	st := ix.st
	l, release, err := s.indexLayout(ix.b, &st)
	if err != nil {
		ix.close()
		return nil, indexLayout{}, nil, err
	}
	return ix, l, release, nil
}

// earlyTaken counts the stagings that took the early index (the tests).
var earlyTaken atomic.Int64

// sameFile says whether two stats are of the same file, unchanged: device, inode,
// size, change and modification times.
func sameFile(a, b *unix.Stat_t) bool {
	return a.Dev == b.Dev && a.Ino == b.Ino && a.Size == b.Size && a.Ctim == b.Ctim && a.Mtim == b.Mtim
}
