package audit

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/agentbox/agentbox/internal/treewalk"
	"golang.org/x/sys/unix"
)

// The scan's directory walk: batched listings, stats and the tree of exec-surface items.

// readDir lists dir (a canonical path) without following symlinks, sorted by name.
// Failures are recorded as skipped places.
func (s *scanner) readDir(dir string) []os.DirEntry {
	ents, _ := s.readDirComplete(dir)
	return ents
}

// readDirComplete is readDir, and whether the listing is the whole directory (not
// cut short by a failure or the entry bound): only a whole listing says that a
// name is absent. Through getdents64 into compact entries (audit_dirents_linux.go),
// as the walk lists: an os.File per listing costs its descriptor's registration
// and an allocation per entry. The entries carry no Info: callers lstat.
func (s *scanner) readDirComplete(dir string) ([]os.DirEntry, bool) {
	fd, err := s.relax.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		s.skip(dir, "cannot open directory: %v", err)
		return nil, false
	}
	defer unix.Close(fd)
	return s.readDirBatches((&direntReader{fd: fd}).next, dir)
}

// readDirBatches lists a directory (at dir) by next, which is os.File.ReadDir or
// a direntReader's, sorted by name; complete is false when a failure or the
// entry bound cut it short.
func (s *scanner) readDirBatches(next func(int) ([]os.DirEntry, error), dir string) (ents []os.DirEntry, complete bool) {
	// Read in batches so that one huge directory cannot exhaust memory before the
	// entry bound is checked.
	complete = true
	for {
		batch, err := next(4096)
		ents = appendBatch(ents, batch)
		s.entries += len(batch)
		if errors.Is(err, io.EOF) || err == nil && len(batch) == 0 {
			break
		}
		if err != nil {
			s.skip(dir, "cannot list directory: %v", err)
			complete = false
			break
		}
		if s.entries >= s.opt.MaxEntries {
			s.stopped = true
			s.skip(dir, "walk stopped after %d entries while listing this directory; the rest of it and of the tree were not searched", s.entries)
			complete = false
			break
		}
	}
	sortNames(ents) // audit_prefetch_linux.go
	return ents, complete
}

// appendBatch adds a listing's batch to ents. The first batch becomes the list
// itself (each batch is a slice of its own that its reader never writes again):
// copying it would be fresh heap for every entry of every walk.
func appendBatch(ents, batch []os.DirEntry) []os.DirEntry {
	if ents == nil {
		return batch
	}
	return append(ents, batch...)
}

// tree walks a working-tree directory.
func (s *scanner) tree(dir string, depth int) {
	if s.stopped {
		return
	}
	if s.entries >= s.opt.MaxEntries {
		s.stopped = true
		s.skip(dir, "walk stopped after %d entries; this directory and the rest of the tree were not searched for nested Git directories", s.entries)
		return
	}
	if fstype, ok := s.pseudo[dir]; ok {
		s.skip(dir, "a %s mount, which holds no project files; not searched", fstype)
		return
	}
	if depth > s.opt.MaxDepth {
		s.skip(dir, "deeper than %d directories; not searched for nested Git directories", s.opt.MaxDepth)
		if s.walk != nil {
			s.walk.Complete = false
		}
		return
	}
	ents, stats, subdirs := s.readDirStat(dir)
	s.verifySubdirs(dir, subdirs) // audit_since_linux.go, as gitDirLike
	if s.gitDirLike(dir, ents) {
		s.gitdir(dir, "", 0)
	}
	nested := false
	if s.walk != nil && depth > 0 {
		for _, e := range ents {
			nested = nested || e.Name() == ".git"
		}
		if nested {
			// Git records this directory as a nested repository: the directory's own
			// entry says so, and nothing below it is the recorder's.
			if last := s.lastEntry(); s.nested == 0 && last != nil && last.Rel == s.rel(dir) {
				last.Nested = true
			}
			s.nested++
			defer func() { s.nested-- }()
		}
	}
	if depth < s.opt.MaxDepth && !s.stopped {
		// The subdirectories this loop enters, listed ahead (audit_prefetch_linux.go),
		// but for those the launch's listings stand for (audit_since_linux.go).
		stat := s.walk != nil && s.nested == 0
		for _, e := range ents {
			if e.IsDir() && e.Name() != ".git" {
				sub := filepath.Join(dir, e.Name())
				if _, ok := s.pseudo[sub]; ok {
					continue
				}
				var k *keptDir
				if s.since != nil {
					k, _ = s.reusable(sub, stat)
				}
				if k == nil {
					s.pre.schedule(sub, stat, depth+1)
				}
			}
		}
	}
	// An entry's absolute path is made only for what the loop acts on: the walk
	// keeps the short relative one, since every absolute path would be fresh heap
	// for every entry of every walk.
	var rels walkRels
	if stats != nil && s.nested == 0 {
		rels = s.walkRels(dir, ents) // audit_since_linux.go
	}
	// Looked up once a directory, not once an entry: only taken sets it, for
	// this directory before the loop and for others within it.
	shared := s.sharing && s.fromLaunch[dir]
	for i, e := range ents {
		name := e.Name()
		if stats != nil && s.nested == 0 {
			// Every entry's path is cut in turn, .git's too: they follow each
			// other in one string.
			if rel := rels.next(name); name != ".git" {
				s.walkEntry(rel, stats[i], shared)
			}
		}
		if treeFileGitOpens(name) && special(e.Type()) {
			s.blocker(filepath.Join(dir, name), e.Type())
			continue
		}
		switch {
		case name == ".git":
			s.dotGit(filepath.Join(dir, name), dir)
		case name == ".gitmodules" && e.Type().IsRegular():
			s.gitmodules(filepath.Join(dir, name))
		case e.IsDir():
			s.tree(filepath.Join(dir, name), depth+1)
		}
	}
}

// walkEntry adds an entry of the tree to the walk, or counts it as the launch's
// (shared) or as read again by an end scan that shares the launch's walk.
func (s *scanner) walkEntry(rel string, st entryStat, shared bool) {
	s.walk.FineCtime = s.walk.FineCtime || st.ctime%1_000_000_000 != 0
	switch {
	case shared:
		s.shared++
	case s.sharing:
		// Read again, not taken: whatever it holds, the launch's walk does not
		// stand for it, even at the same count.
		s.unshared++
	case len(s.walk.Entries) == cap(s.walk.Entries) && len(s.walk.Entries) >= walkChunk:
		s.chunks = append(s.chunks, s.walk.Entries)
		s.walk.Entries = make([]treewalk.Entry, 0, walkChunk)
		fallthrough
	default:
		s.walk.Entries = append(s.walk.Entries, treewalk.Entry{Rel: rel, Mode: st.mode & unix.S_IFMT, Ctime: st.ctime, Ino: st.ino, Perm: uint16(st.mode & 0o7777)})
	}
}

// walkChunk is the block the walk's entry list grows by (see scanner.chunks); a
// variable for the tests.
var walkChunk = 8192

// lastEntry is the walk's last entry, nil when there is none.
func (s *scanner) lastEntry() *treewalk.Entry {
	if n := len(s.walk.Entries); n > 0 {
		return &s.walk.Entries[n-1]
	}
	if n := len(s.chunks); n > 0 {
		c := s.chunks[n-1]
		return &c[len(c)-1]
	}
	return nil
}

// statParts is how many goroutines lstat one directory's entries: a big tree's
// lstats are enough work to share between the cores (Git's status does the same
// with its preload-index threads).
const statParts = 4

// entryStat is what the walk keeps of an entry's lstat: 16 bytes, not 144, since a
// directory may hold up to MaxEntries of them.
type entryStat struct {
	mode  uint32 // st_mode & (S_IFMT | 07777)
	ino   uint32 // st_ino's low 32 bits, as Git's index keeps it
	ctime int64  // ns
}

// subdirID is a subdirectory's identity as its parent's lstat found it: the end
// scan takes a launch listing for it only if it is still that directory
// (audit_since_linux.go). Kept apart, for the few subdirectories, so that
// entryStat stays small.
type subdirID struct {
	name     string
	dev, ino uint64
}

// linkID is an entry that is not a directory and has more than one name
// (st_nlink): the launch checks that all its names are in the tree
// (Launch.dropOutsideLinks).
type linkID struct {
	dev, ino, nlink uint64
}

// statAll lstat's each of ents in the directory fd into stats, on parts goroutines
// (through rings when there are, audit_uring_linux.go), and returns the
// subdirectories' identities and the entries with more than one name; ok is false
// when one failed.
func statAll(fd int, ents []os.DirEntry, stats []entryStat, parts int, rings *ringPool) (subdirs []subdirID, links []linkID, ok bool) {
	n := len(ents)
	if n < 32 || parts <= 1 {
		var f statFound
		ok := rings.statRange(fd, ents, stats, 0, n, &f)
		return f.subdirs, f.links, ok
	}
	var wg sync.WaitGroup
	var failed atomic.Bool
	all := make([]statFound, parts)
	for k := 1; k < parts; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !rings.statRange(fd, ents, stats, k*n/parts, (k+1)*n/parts, &all[k]) {
				failed.Store(true)
			}
		}()
	}
	ok = rings.statRange(fd, ents, stats, 0, n/parts, &all[0])
	wg.Wait()
	for _, f := range all {
		subdirs, links = append(subdirs, f.subdirs...), append(links, f.links...)
	}
	return subdirs, links, ok && !failed.Load()
}

// statFound is what one goroutine of statAll found beside the stats.
type statFound struct {
	subdirs []subdirID
	links   []linkID
}

// add keeps one entry's lstat: mode, inode, change time, and for a directory its
// identity, for another entry with more than one name its identity and count.
func (f *statFound) add(e os.DirEntry, st *entryStat, mode uint32, ino uint64, ctime int64, dev, nlink uint64) {
	*st = entryStat{mode: mode & (unix.S_IFMT | 0o7777), ino: uint32(ino), ctime: ctime}
	if st.mode&unix.S_IFMT == unix.S_IFDIR {
		f.subdirs = append(f.subdirs, subdirID{name: e.Name(), dev: dev, ino: ino})
	} else if nlink > 1 {
		f.links = append(f.links, linkID{dev: dev, ino: ino, nlink: nlink})
	}
}

// statByFstatat lstat's ents[lo:hi] one fstatat each.
func statByFstatat(fd int, ents []os.DirEntry, stats []entryStat, lo, hi int, f *statFound) bool {
	ok := true
	var st unix.Stat_t
	for i := lo; i < hi; i++ {
		if lstatAt(fd, ents[i], &st) != nil { // audit_dirents_linux.go
			ok = false
			continue
		}
		f.add(ents[i], &stats[i], st.Mode, st.Ino, st.Ctim.Nano(), uint64(st.Dev), uint64(st.Nlink))
	}
	return ok
}

// rel is p relative to the repository, '/'-separated.
func (s *scanner) rel(p string) string {
	return strings.TrimPrefix(p[len(s.repo):], "/")
}

// readDirStat is readDir that, while the walk is recorded, also lstat's each entry
// through the directory's descriptor (fstatat, no path resolution); stats[i] is
// ents[i]'s. A directory or entry that cannot be inspected leaves the walk
// incomplete.
//
// With a launch watch (opt.Watch), each directory is marked before it is read and
// its listing kept when read whole; with opt.Since, a directory the launch's
// listing still stands for is taken from it (audit_since_linux.go).
func (s *scanner) readDirStat(dir string) (ents []os.DirEntry, stats []entryStat, subdirs []subdirID) {
	stat := s.walk != nil && s.nested == 0
	before := len(s.surface.Skipped)
	s.listed++
	if s.since != nil {
		if ents, stats, ok := s.taken(dir, stat); ok {
			if len(s.surface.Skipped) != before && stat {
				s.walk.Complete = false
			}
			return ents, stats, nil
		}
	}
	if l := s.pre.take(dir, stat); l != nil && !denied(l.openErr) { // audit_prefetch_linux.go
		if l.openErr != nil {
			s.skip(dir, "cannot open directory: %v", l.openErr)
			if stat {
				s.walk.Complete = false
			}
			return nil, nil, nil
		}
		ents, stats, ok := s.replay(l, dir)
		s.launch.noteLinks(dir, l.links) // audit_since_linux.go
		if stat && !ok {
			s.walk.Complete = false
		}
		if len(s.surface.Skipped) != before {
			if stat {
				s.walk.Complete = false
			}
		} else if !stat || ok {
			s.keep(dir, l.watched, ents, stats)
		}
		return ents, stats, l.subdirs
	}
	fd, err := s.relax.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY) // audit_unreadable_linux.go
	if err != nil {
		s.skip(dir, "cannot open directory: %v", err)
		if stat {
			s.walk.Complete = false
		}
		return nil, nil, nil
	}
	defer unix.Close(fd)
	watched := s.launch.watchDir(fd)
	ents, _ = s.readDirBatches((&direntReader{fd: fd}).next, dir) // audit_dirents_linux.go
	ok := true
	if stat {
		stats = make([]entryStat, len(ents))
		var links []linkID
		subdirs, links, ok = statAll(fd, ents, stats, statParts, s.pre.ringPool())
		s.launch.noteLinks(dir, links) // audit_since_linux.go
		if !ok {
			s.walk.Complete = false
		}
	}
	if len(s.surface.Skipped) != before {
		if stat {
			s.walk.Complete = false
		}
	} else if ok {
		s.keep(dir, watched, ents, stats)
	}
	return ents, stats, subdirs
}

// looksLikeGitDir mirrors Git's is_git_directory: a HEAD, and objects/ and refs/ (or
// a commondir that provides them). The types are not checked, as Git follows links.
func looksLikeGitDir(ents []os.DirEntry) bool {
	var head, common, objects, refs bool
	for _, e := range ents {
		switch e.Name() {
		case "HEAD":
			head = true
		case "commondir":
			common = true
		case "objects":
			objects = true
		case "refs":
			refs = true
		}
	}
	return head && (common || objects && refs)
}
