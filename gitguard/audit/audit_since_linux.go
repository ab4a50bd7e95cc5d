package audit

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/treewalk"
	"github.com/agentbox/agentbox/internal/treewatch"
)

// The end scan without the end walk: reading every directory of the tree again and
// lstat'ing every entry is most of what an unchanged session would cost. With a watch
// placed at launch (ScanOptions.Watch), each directory is marked before it is read,
// so its listing — names, types and, for the walk, each entry's lstat — stays true
// until an event says otherwise. The end scan (ScanOptions.Since) takes the launch
// listing of every directory that is
//
//   - kept: read whole at launch, with no skip and every lstat done;
//   - clean: its mark saw no event (treewatch: an entry created, removed, moved,
//     opened, written or chmod'ed; the directory moved or removed) and none of its
//     entries is an inode an event was about under another name (a hard link
//     written through elsewhere in the tree, or a subdirectory whose own entries
//     changed, since its ctime did);
//   - the same directory: reached through a directory taken the same way (whose
//     names did not change, so this name still leads to the inode it led to), or
//     opened again and found to be the inode the mark is on. A directory removed
//     and made again with the same inode number is not clean: its mark saw the
//     removal.
//
// Every other directory is read as before, and everything the scan reads beyond
// the tree's listings — gitdirs, config files, .gitmodules, pointer files, hook
// fingerprints — is read afresh whatever the watch says. When the watch lost
// anything (a full queue, a handle it cannot read), no listing is taken.
//
// The walk's clock is then the launch walk's: the lstat's taken from the launch
// were read after it, so the recorder's "changed since" window starts there (the
// files this session changed fall in the next staging's window; the stage state's
// Recent entries answer for them without the index). A later clock would need
// every event to have been read before it, which a write already stamped but not
// yet reported could break.

// Launch is what a launch scan with ScanOptions.Watch kept for the end scan.
type Launch struct {
	watch   *treewatch.Watch
	changes *treewatch.Changes // set by Stop
	walk    bool               // the launch scan recorded a walk (ScanOptions.Walk)
	clock   treewalk.Clock     // its clock
	kept    map[string]*keptDir
	// links are the files of the tree with more than one name, by device and
	// inode: how many names they have, and the directories the walk found them in
	// (dropOutsideLinks).
	links map[[2]uint64]*linkNames
	// entries is the launch walk's list, when it was complete and every
	// directory it read was kept: an end scan that finds nothing changed takes it
	// as its own (Scan), instead of building the same 100,000 entries again.
	entries []treewalk.Entry
	// indexes are the launch scan's readings of the Git indexes it read, by path
	// (audit_index_linux.go: what an end scan may take of them).
	indexes map[string]launchIndex
}

// linkNames is one file with more than one name, as the launch walk found it.
type linkNames struct {
	nlink uint64   // its st_nlink (the highest seen)
	dirs  []string // the directory of each name the walk found, once per name
}

// noteLinks records the entries of dir with more than one name.
func (l *Launch) noteLinks(dir string, links []linkID) {
	if l == nil || len(links) == 0 {
		return
	}
	if l.links == nil {
		l.links = map[[2]uint64]*linkNames{}
	}
	for _, k := range links {
		n := l.links[[2]uint64{k.dev, k.ino}]
		if n == nil {
			n = &linkNames{}
			l.links[[2]uint64{k.dev, k.ino}] = n
		}
		n.nlink = max(n.nlink, k.nlink)
		n.dirs = append(n.dirs, dir)
	}
}

// dropOutsideLinks forgets the listing of each directory holding a file that has
// a name the walk did not find (st_nlink counts more names than the tree's
// listings with stats hold): that name lies outside the tree (an --add-dir the
// sandbox writes, a package manager's store that hard-links into the tree, a
// `cp -al` copy), below a nested repository, or in a directory not read, where no
// mark may be; a write, chmod or link through it reaches neither this directory's
// mark nor any other, and the end scan would keep the file's old lstat. A file
// whose every name is in the tree is seen through whichever is used
// (Changes.Touched).
func (l *Launch) dropOutsideLinks() {
	for _, n := range l.links {
		if uint64(len(n.dirs)) < n.nlink {
			for _, d := range n.dirs {
				delete(l.kept, d)
			}
		}
	}
	l.links = nil
}

// keepWalk records the launch walk w, read from listed directories, for
// unchanged.
func (l *Launch) keepWalk(w *treewalk.Walk, listed int) {
	if w.Complete && listed == len(l.kept) {
		l.entries = w.Entries
	}
}

// unchanged says whether the watch saw nothing at all, over a launch walk it
// kept whole: then an end scan's walk is the launch's.
func (l *Launch) unchanged() bool {
	return l.entries != nil && l.changes != nil && l.changes.Quiet()
}

// keptDir is one directory's listing as the launch scan read it.
type keptDir struct {
	l   *listing
	dir treewatch.Dir
	// rels are the walk's relative paths of the entries, made once at launch
	// (walkRels): an end scan taking the listing takes them too, instead of
	// making 100,000 strings again.
	rels walkRels
	// gitDir is looksLikeGitDir of the listing, asked once at launch
	// (gitDirLike): a taken listing has the same names.
	gitDir bool
}

// Stop ends the watch once the session's processes are gone; the Launch can then
// be a later scan's Since. Stopping twice is harmless.
func (l *Launch) Stop() {
	if l != nil && l.changes == nil {
		l.changes = l.watch.Stop()
	}
}

// Released waits until the watch Stop ended has let go of its kernel group
// (treewatch.Watch.Released): its caller keeps no descriptor of it after this.
func (l *Launch) Released() {
	if l != nil && l.watch != nil {
		l.watch.Released()
	}
}

// Peek is a Launch for a scan's Since in the middle of the session (a
// checkpoint): what the watch saw so far (treewatch.Snapshot), over the listings
// kept at launch, while the watch goes on for the end scan. A scan of it never
// builds its walk in the launch walk's list (the end scan may, and the launch
// walk's entries stay the launch's); it shares the list only when nothing
// changed, and reads it then.
func (l *Launch) Peek() *Launch {
	if l == nil {
		return nil
	}
	if l.changes != nil {
		return &Launch{changes: &treewatch.Changes{Lost: "the watch was stopped"}}
	}
	v := &Launch{changes: l.watch.Snapshot(), walk: l.walk, clock: l.clock, kept: l.kept}
	if v.changes.Quiet() {
		v.entries = l.entries
	}
	return v
}

// Close releases the watch without using it.
func (l *Launch) Close() {
	if l != nil && l.changes == nil {
		l.watch.Close()
		l.changes = &treewatch.Changes{Lost: "closed"}
	}
}

// OnDevice reports whether the launch kept the listing of a directory on the
// device dev (st_dev): the tree's own filesystem, and any mounted in it (a tmpfs,
// a btrfs subvolume). A file there that a process held open since before the
// marks (the sandbox's standard streams) could be mapped and written through with
// no event, and the end scan would keep its launch lstat.
func (l *Launch) OnDevice(dev uint64) bool {
	if l == nil {
		return false
	}
	for _, k := range l.kept {
		if k.dir.Dev == dev {
			return true
		}
	}
	return false
}

// Lost says why the end scan cannot take any listing; "" when it can.
func (l *Launch) Lost() string {
	switch {
	case l == nil:
		return "no watch"
	case l.changes == nil:
		return "the watch was not stopped"
	}
	return l.changes.Lost
}

// newLaunch starts the watch for a launch scan; nil where the kernel cannot watch.
func newLaunch(walk *treewalk.Walk) *Launch {
	w, err := treewatch.New()
	if err != nil {
		return nil
	}
	l := &Launch{watch: w, kept: map[string]*keptDir{}, walk: walk != nil}
	if walk != nil {
		l.clock = walk.Clock
	}
	return l
}

// watchDir marks the open directory fd before it is read; nil when it could not
// be (the watch then keeps nothing).
func (l *Launch) watchDir(fd int) *treewatch.Dir {
	if l == nil {
		return nil
	}
	d, err := l.watch.Add(fd)
	if err != nil {
		l.watch.Fail("a directory could not be watched: " + err.Error())
		return nil
	}
	return &d
}

// keep records dir's listing, read whole after its mark was placed.
func (s *scanner) keep(dir string, d *treewatch.Dir, ents []os.DirEntry, stats []entryStat) {
	if s.launch == nil || d == nil {
		return
	}
	s.launch.kept[dir] = &keptDir{dir: *d, l: &listing{ents: ents, stats: stats, batches: []int{len(ents), 0},
		lastErr: io.EOF, sorted: true, statOK: true, stat: stats != nil}}
}

// reusable says whether dir's launch listing can stand for it, as far as the
// watch tells; whether dir is still the same directory is taken's to check. With
// the entries' lstat, refresh lists the entries to lstat again: those whose inode
// an event was about, in a directory whose names did not change (a file written,
// truncated, chmod'ed or opened in place). Every other entry's lstat is the
// launch's, as in a directory the watch saw nothing in.
func (s *scanner) reusable(dir string, stat bool) (k *keptDir, refresh []int) {
	k = s.since.kept[dir]
	ch := s.since.changes
	if k == nil || k.l.stat != stat || ch.Renamed(k.dir.ID) {
		return nil, nil
	}
	if !stat {
		// Names and types are all the listing holds, and they did not change.
		return k, nil
	}
	if ch.AnyTouched() {
		// Asked when the parent schedules dir and again when dir is taken: the
		// entries are looked at once.
		var seen bool
		if refresh, seen = s.touched[k]; !seen {
			for i, st := range k.l.stats {
				if ch.Touched(st.ino) {
					refresh = append(refresh, i)
				}
			}
			s.touched[k] = refresh
		}
	}
	if ch.Dirty(k.dir.ID) && len(refresh) == 0 {
		return nil, nil // an event named it, and about none of its entries
	}
	return k, refresh
}

// taken is dir's listing from the launch, counted against the scan's bounds as if
// read; ok false when it must be read again.
func (s *scanner) taken(dir string, stat bool) (ents []os.DirEntry, stats []entryStat, ok bool) {
	k, refresh := s.reusable(dir, stat)
	if k == nil {
		return nil, nil, false
	}
	l := k.l
	if len(refresh) > 0 || !s.fromLaunch[filepath.Dir(dir)] && !s.verified[dir] {
		// Reached through a directory read again without its entries' lstat (or
		// the top), the name may lead elsewhere now; and the entries to lstat
		// again are looked up in the directory the mark is on.
		fd, err := s.openPath(dir, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return nil, nil, false
		}
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		if err == nil && st.Dev == k.dir.Dev && st.Ino == k.dir.Ino && len(refresh) > 0 {
			l, err = refreshed(fd, k.l, refresh)
		}
		unix.Close(fd)
		if err != nil || st.Dev != k.dir.Dev || st.Ino != k.dir.Ino {
			return nil, nil, false
		}
	}
	ents, stats, _ = s.replay(l, dir)
	s.fromLaunch[dir] = true
	s.surface.taken++
	s.surface.refreshed += len(refresh)
	return ents, stats, true
}

// refreshed is l with the entries at refresh lstat'ed again through the directory
// fd; the kept listing is not written, as a checkpoint's scan and the end scan
// both take it. An entry that is no longer the inode or the type it was is an
// error: the directory is read again.
func refreshed(fd int, l *listing, refresh []int) (*listing, error) {
	c := *l
	c.stats = slices.Clone(l.stats)
	var st unix.Stat_t
	for _, i := range refresh {
		if err := lstatAt(fd, l.ents[i], &st); err != nil {
			return nil, err
		}
		e := entryStat{mode: st.Mode & (unix.S_IFMT | 0o7777), ino: uint32(st.Ino), ctime: st.Ctim.Nano()}
		if e.ino != c.stats[i].ino || e.mode&unix.S_IFMT != c.stats[i].mode&unix.S_IFMT {
			return nil, errors.New("an entry is another file than the launch listed")
		}
		c.stats[i] = e
	}
	return &c, nil
}

// verifySubdirs notes, in a directory read again (not taken) with its entries'
// lstat, each subdirectory that is the one whose listing the launch kept: the
// same device and inode, read just now through this listing's name.
func (s *scanner) verifySubdirs(dir string, subdirs []subdirID) {
	if s.since == nil || s.fromLaunch[dir] {
		return
	}
	for _, sd := range subdirs {
		sub := filepath.Join(dir, sd.name)
		if k := s.since.kept[sub]; k != nil && k.dir.Dev == sd.dev && k.dir.Ino == sd.ino {
			s.verified[sub] = true
		}
	}
}

// gitDirLike is looksLikeGitDir(ents) for dir's listing: the launch's answer
// when the listing was taken from the launch whole, else asked here, and kept
// for the end scan when this is a launch scan keeping the listing.
func (s *scanner) gitDirLike(dir string, ents []os.DirEntry) bool {
	if s.since != nil && s.fromLaunch[dir] {
		if k := s.since.kept[dir]; len(k.l.ents) == len(ents) {
			return k.gitDir
		}
	}
	git := looksLikeGitDir(ents)
	if s.launch != nil {
		if k := s.launch.kept[dir]; k != nil && len(k.l.ents) == len(ents) {
			k.gitDir = git
		}
	}
	return git
}

// walkRels are the walk's relative paths of a directory's entries, in the
// listing's order, one after the other in one string: each the directory's
// relative path and a '/' (prefix bytes; none at the top), then the entry's name.
// The walk cuts each entry's path from it as it goes (next), so a directory
// costs one allocation, not a string header (16 bytes) an entry besides.
type walkRels struct {
	all    string
	prefix int
	n      int // the entries
	off    int // where the next entry's path begins
}

// next is the path of the entry named name, the one after the last asked for.
func (r *walkRels) next(name string) string {
	l := r.prefix + len(name)
	rel := r.all[r.off : r.off+l]
	r.off += l
	return rel
}

// walkRels returns the walk's relative paths of dir's entries: the launch's when
// its listing was taken from the launch, else made here, and kept for the end
// scan when this is a launch scan keeping the listing.
func (s *scanner) walkRels(dir string, ents []os.DirEntry) walkRels {
	if s.since != nil && s.fromLaunch[dir] {
		if k := s.since.kept[dir]; k.rels.n == len(ents) && k.rels.all != "" {
			return walkRels{all: k.rels.all, prefix: k.rels.prefix, n: k.rels.n}
		}
	}
	relDir := s.rel(dir)
	prefix := 0
	if relDir != "" {
		prefix = len(relDir) + 1
	}
	n := 0
	for _, e := range ents {
		n += prefix + len(e.Name())
	}
	b := make([]byte, 0, n)
	for _, e := range ents {
		if relDir != "" {
			b = append(append(b, relDir...), '/')
		}
		b = append(b, e.Name()...)
	}
	r := walkRels{all: unsafe.String(unsafe.SliceData(b), len(b)), prefix: prefix, n: len(ents)} // b is not written again
	if s.launch != nil {
		if k := s.launch.kept[dir]; k != nil && len(k.l.ents) == len(ents) {
			k.rels = r
		}
	}
	return r
}

// markTreeMax bounds the directories markTree marks below one gitdir, and
// markTreeEntries the entries it lists to find them.
const (
	markTreeMax     = 4096
	markTreeEntries = 200_000
)

// markTree marks dir and every directory below it, each before it is read, keeping no
// listing: a nested repository's gitdir, which the scan reads afresh each time but
// which lies in the sandbox's writable mount (the top's .git is a bind of its own),
// so it must not be a place to make an unseen hard link in. Anything it cannot mark,
// or a gitdir beyond its bounds, makes the watch vouch for nothing.
func (l *Launch) markTree(dir string, open func(string, int) (int, error)) {
	fd, err := open(dir, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		l.watch.Fail("a nested Git directory could not be watched: " + err.Error())
		return
	}
	dirs, entries := 0, 0
	var mark func(fd int) bool
	mark = func(fd int) bool {
		defer unix.Close(fd)
		if dirs++; dirs > markTreeMax || l.watchDir(fd) == nil {
			l.watch.Fail("a nested Git directory could not be watched whole")
			return false
		}
		r := &direntReader{fd: fd}
		for {
			batch, err := r.next(4096)
			if errors.Is(err, io.EOF) {
				return true
			}
			if entries += len(batch); err != nil || entries > markTreeEntries {
				l.watch.Fail("a nested Git directory could not be listed whole")
				return false
			}
			for _, e := range batch {
				if !e.IsDir() {
					continue
				}
				sub, err := unix.Openat(fd, e.Name(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
				if err != nil {
					l.watch.Fail("a nested Git directory could not be watched: " + err.Error())
					return false
				}
				if !mark(sub) {
					return false
				}
			}
		}
	}
	mark(fd)
}
