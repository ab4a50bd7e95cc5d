package shadow

import (
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/treewalk"
)

// changedPaths returns the paths that may differ between the index (as of the
// state's clock) and the walk: entries with a ctime at or after it, tracked paths
// the walk does not find, nested repositories. errSweep when that cannot be told.
//
// A removal changes the ctime of the directory it removed from, so tracked paths
// are looked for only in directories whose ctime changed (or that are gone), and the
// index is read only when some directory changed.
func (s *Store) changedPaths(st stageState, w *treewalk.Walk) ([]string, error) {
	s.indexRead = false
	if w == nil || !w.Complete {
		return nil, errSweep
	}
	threshold, ok := treewalk.Since(st.Clock, w.Clock, st.Fine && w.FineCtime)
	if !ok {
		return nil, errSweep
	}
	// A .gitignore gone, tracked or not: what it ignored is old, anywhere below.
	// (Edited in place: the set is the same; only added: the old ones are the set.)
	if st.Ignores == "" || ignoreSet(w, 0) != st.Ignores && ignoreSet(w, threshold) != st.Ignores {
		return nil, errSweep
	}
	f := &changeFinder{s: s, st: st, w: w, threshold: threshold, repoFd: -1,
		dirs: map[string]bool{"": w.RootCtime >= threshold}}
	defer f.close()
	// The same boot, no step back since.
	_, f.addedOK = treewalk.Since(st.Added, w.Clock, true)
	if err := f.readFew(); err != nil {
		return nil, err
	}
	changedDir, err := f.entries()
	if err != nil {
		return nil, err
	}
	if !changedDir {
		return f.out, nil // nothing was removed anywhere
	}
	if err := f.removed(); err != nil {
		return nil, err
	}
	return f.out, nil
}

// changeFinder is one changedPaths: the walk, the index (read at most once, and
// only as much of it as the changes need) and the paths found so far.
type changeFinder struct {
	s         *Store
	st        stageState
	w         *treewalk.Walk
	threshold int64 // entries with a ctime at or after it may have changed
	addedOK   bool  // st.Added can be compared with the walk's ctimes

	idx     []indexEntry // the whole index, once read
	idxRead bool
	// few, when no directory changed, holds the index entries of the entries in
	// the window alone: then the rest of the index is never read.
	few    map[string]indexEntry
	repoFd int // the repository, opened for sameContent; -1 until then

	out     []string
	covered int             // files below the new directories staged whole
	dirs    map[string]bool // every directory walked: did its ctime change?
}

func (f *changeFinder) close() {
	if f.repoFd >= 0 {
		unix.Close(f.repoFd)
	}
}

// index reads the whole index, once.
func (f *changeFinder) index() ([]indexEntry, error) {
	if !f.idxRead {
		var err error
		if f.idx, err = readIndex(filepath.Join(f.s.Dir, "index")); err != nil {
			return nil, errSweep
		}
		f.idxRead = true
		f.s.indexRead = true
	}
	return f.idx, nil
}

// readFew, when no directory changed, looks up in the index only the entries in
// the window (readIndexPaths), or finds them in the stage state's Recent.
func (f *changeFinder) readFew() error {
	if f.w.RootCtime >= f.threshold {
		return nil
	}
	want := map[string]bool{}
	for _, e := range f.w.Entries {
		switch {
		case e.Ctime < f.threshold:
		case e.IsDir() || len(want) >= maxChangedPaths:
			return nil
		default:
			want[e.Rel] = true
		}
	}
	if len(want) == 0 {
		return nil
	}
	var ok bool
	if f.few, ok = recentIndex(f.st.Recent, want); !ok {
		var err error
		if f.few, err = readIndexPaths(filepath.Join(f.s.Dir, "index"), want); err != nil {
			return errSweep
		}
		f.s.indexRead = true
	}
	return nil
}

// search finds rel in the whole index.
func (f *changeFinder) search(rel string) (int, bool, error) {
	idx, err := f.index()
	if err != nil {
		return 0, false, err
	}
	i, found := slices.BinarySearchFunc(idx, rel, func(x indexEntry, p string) int { return strings.Compare(x.path, p) })
	return i, found, nil
}

// trackedBelow says whether the index has entries below directory p.
func (f *changeFinder) trackedBelow(p string) (bool, error) {
	i, _, err := f.search(p + "/")
	if err != nil {
		return false, err
	}
	return i < len(f.idx) && strings.HasPrefix(f.idx[i].path, p+"/"), nil
}

// replaced says whether, below the directory w.Entries[i], whose ctime changed,
// some entry is not the one the index holds at its path (another inode, another
// ctime, or none): it was renamed into place over a directory of the same name,
// bringing old entries.
func (f *changeFinder) replaced(i int) (bool, error) {
	below := f.w.Entries[i].Rel + "/"
	for _, e := range f.w.Entries[i+1:] {
		if !strings.HasPrefix(e.Rel, below) {
			break
		}
		if e.IsDir() || e.Ctime >= f.threshold {
			continue
		}
		j, found, err := f.search(e.Rel)
		if err != nil {
			return false, err
		}
		if !found || f.idx[j].ino != e.Ino || f.idx[j].ctime != e.Ctime {
			return true, nil
		}
	}
	return false, nil
}

// lookup is the index's entry at rel.
func (f *changeFinder) lookup(rel string) (indexEntry, bool, error) {
	if f.few != nil {
		ie, ok := f.few[rel]
		return ie, ok, nil
	}
	j, found, err := f.search(rel)
	if err != nil || !found {
		return indexEntry{}, false, err
	}
	return f.idx[j], true, nil
}

// sameAsIndex says whether the entry, in the window, is still what the index
// holds at its path (changed.go: the Added clock, then sameContent).
func (f *changeFinder) sameAsIndex(e treewalk.Entry) (bool, error) {
	ie, found, err := f.lookup(e.Rel)
	if err != nil {
		return false, err
	}
	if !found || ie.ino != e.Ino || ie.ctime != e.Ctime {
		return false, nil
	}
	if f.addedOK && e.Ctime < f.st.Added.Real {
		return true, nil
	}
	if e.Mode != unix.S_IFREG || int64(ie.size) > maxRacyRead {
		return false, nil
	}
	if f.repoFd < 0 {
		if f.repoFd, err = unix.Open(f.s.Repo, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			return false, nil
		}
	}
	return sameContent(f.repoFd, e, ie), nil
}

// add names p for staging; false past maxChangedPaths (the sweep is cheaper).
func (f *changeFinder) add(p string) bool {
	f.out = append(f.out, p)
	if len(f.out)+f.covered > maxChangedPaths {
		f.s.manyChanged = true // the sweep gets a head start (prestage.go)
		return false
	}
	return true
}

// entries goes through the walk and names what may have changed; it says whether
// any directory's entries changed (then removed looks for what went).
func (f *changeFinder) entries() (changedDir bool, err error) {
	changedDir = f.w.RootCtime >= f.threshold
	verified := ""    // a changed directory whose entries are all the index's: below it too
	cover := ""       // a new directory staged whole: what lies below it is covered
	coverNew := false // cover is a new directory (not a nested repository)
	for i, e := range f.w.Entries {
		if e.IsDir() {
			f.dirs[e.Rel] = e.Ctime >= f.threshold
			changedDir = changedDir || e.Ctime >= f.threshold
		}
		if cover != "" && strings.HasPrefix(e.Rel, cover) {
			// One pathspec, but each file below is Git's to add, and the bulk
			// check-in of many is quadratic (prestage.go): past the bound, the
			// sweep is cheaper.
			if coverNew && !e.IsDir() {
				if f.covered++; len(f.out)+f.covered > maxChangedPaths {
					f.s.manyChanged = true
					return false, errSweep
				}
			}
			continue
		}
		cover = ""
		switch {
		case e.Nested:
			if !f.add(e.Rel) {
				return false, errSweep
			}
			cover, coverNew = e.Rel+"/", false
		case e.Ctime < f.threshold:
		case path.Base(e.Rel) == ".gitignore":
			// What it stops ignoring is old: its whole directory.
			dir := path.Dir(e.Rel)
			if dir == "." || !f.add(dir) {
				return false, errSweep
			}
		case e.IsDir():
			whole, err := f.newDir(i, &verified)
			if err != nil {
				return false, err
			}
			if whole {
				if !f.add(e.Rel) {
					return false, errSweep
				}
				cover, coverNew = e.Rel+"/", true
			}
		default:
			same, err := f.sameAsIndex(e)
			if err != nil {
				return false, err
			}
			if !same && !f.add(e.Rel) {
				return false, errSweep
			}
		}
	}
	return changedDir, nil
}

// newDir says whether the directory w.Entries[i], whose ctime changed, is staged
// whole. Entries came or went: the new ones have new ctimes, the gone ones are
// found by removed. A directory the index knows nothing below is new (or renamed
// into place, its content old): staged whole. So is one renamed over a directory
// the index knows (its old entries are not the index's). verified is the last
// changed directory whose entries were all the index's: below it, they still are.
func (f *changeFinder) newDir(i int, verified *string) (bool, error) {
	rel := f.w.Entries[i].Rel
	tracked, err := f.trackedBelow(rel)
	if err != nil {
		return false, err
	}
	if tracked && (*verified == "" || !strings.HasPrefix(rel, *verified)) {
		r, err := f.replaced(i)
		if err != nil {
			return false, err
		}
		if r {
			tracked = false
		} else {
			*verified = rel + "/"
		}
	}
	return !tracked, nil
}

// removed names the tracked paths gone from the directories whose ctime changed
// (or that are gone themselves).
func (f *changeFinder) removed() error {
	in := map[string]struct{}{}
	for _, e := range f.w.Entries {
		if f.dirs[parent(e.Rel)] {
			in[e.Rel] = struct{}{}
		}
	}
	idx, err := f.index()
	if err != nil {
		return err
	}
	for _, e := range idx {
		changed, exists := f.dirs[parent(e.path)]
		if exists && !changed {
			continue
		}
		if _, ok := in[e.path]; ok {
			continue
		}
		if path.Base(e.path) == ".gitignore" {
			dir := path.Dir(e.path)
			if dir == "." || !f.add(dir) {
				return errSweep
			}
			continue
		}
		if !f.add(e.path) {
			return errSweep
		}
	}
	return nil
}
