package audit

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/gitguard"
	"github.com/agentbox/agentbox/gitguard/gitconfig"
	"github.com/agentbox/agentbox/internal/safepath"
	"github.com/agentbox/agentbox/internal/treewalk"

	"github.com/agentbox/agentbox/policy"
)

const (
	defaultMaxEntries = 2_000_000
	defaultMaxDepth   = 256
	maxPointerSize    = 64 << 10 // a .git file or commondir is one line
	maxHookHash       = 64 << 20 // hooks may be binaries; hash at most this much
)

// Scan walks repo (an absolute, canonical directory) and returns its exec surface:
//
//   - every .git in the working tree, at any depth: a directory is a gitdir; a
//     "gitdir:" file or a symlink is a pointer, and the gitdir it names is audited;
//   - every directory Git would take for a bare repository (HEAD plus objects/ and
//     refs/, or HEAD plus commondir), since Git uses it as a gitdir when run inside;
//   - for each gitdir: config, config.worktree, commondir (and the gitdir it names),
//     hooks/ (and core.hooksPath when it resolves inside repo), modules/** and
//     worktrees/* (their config.worktree and commondir), and sequencer todo lists;
//   - every file those configs and HostConfigs include, when it lies inside repo;
//   - every .gitmodules file;
//   - each of opt.GitDirs as a gitdir.
//
// Working-tree directories that are symlinks are not entered. Files are opened
// without following symlinks and non-blocking; a symlink is recorded as such, and its
// target is read only when it resolves inside repo (or opt.GitDirs).
func Scan(repo string, opt ScanOptions) (*Surface, error) {
	fi, err := os.Lstat(repo)
	if err != nil {
		return nil, fmt.Errorf("audit %s: %w", repo, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("audit %s: not a directory", repo)
	}
	if opt.MaxEntries <= 0 {
		opt.MaxEntries = defaultMaxEntries
	}
	if opt.MaxDepth <= 0 {
		opt.MaxDepth = defaultMaxDepth
	}
	s := &scanner{
		repo:     filepath.Clean(repo),
		opt:      opt,
		surface:  &Surface{Repo: repo, Items: map[string]*Item{}},
		gitdirs:  map[string]bool{},
		configs:  map[string][]gitconfig.Entry{},
		expanded: map[string]expansion{},
		hooks:    map[string]bool{},
	}
	for _, f := range opt.HostConfigs {
		s.hostEntries = append(s.hostEntries, s.config(f, "", 0)...)
	}
	if opt.Walk {
		// The clock before the top's lstat, as before every other entry's.
		s.walk = &treewalk.Walk{Clock: treewalk.Now(), Complete: true}
		var st unix.Stat_t
		if err := unix.Lstat(repo, &st); err == nil {
			s.walk.RootCtime = st.Ctim.Nano()
			s.walk.RootCtime = st.Ctim.Nano()
		} else {
			s.walk.Complete = false
		}
		s.surface.Walk = s.walk
	}
	switch {
	case opt.Watch:
		s.launch = newLaunch(s.walk)
		s.surface.Launch = s.launch
	case opt.Since.Lost() == "" && opt.Since.walk == opt.Walk:
		s.since, s.fromLaunch, s.verified, s.touched = opt.Since, map[string]bool{}, map[string]bool{}, map[*keptDir]bool{}
		if s.walk != nil {
			// audit_since_linux.go: the lstat's taken from the launch were read
			// after its clock, not this one.
			s.walk.Clock = opt.Since.clock
			if s.sharing = opt.Since.unchanged(); s.sharing {
				// The walk stays empty: it is the launch's.
			} else if e := opt.Since.entries; cap(e) > 0 {
				// Something changed: the walk is built entry by entry, in the
				// launch walk's list, whose pages are in already. A fresh list
				// of 100,000 entries faulted in 1,200 pages of new heap, about
				// 13 ms of a ten-file session's end scan on this VM. The launch
				// walk is no one's after this (ScanOptions.Since), and the
				// Launch no longer offers it for sharing.
				s.walk.Entries, opt.Since.entries = e[:0], nil
			}
		}
	}
	if s.walk != nil && !s.sharing && s.walk.Entries == nil {
		// Not before: an end scan whose walk is the launch's, or is built in
		// the launch walk's list, would allocate a list of WalkHint entries
		// (the session's end scan passes the launch walk's length) only to drop
		// it, memory that, once the collector has freed the launch's garbage
		// during the command, is zeroed and faulted in for nothing.
		if opt.WalkHint > 0 {
			s.walk.Entries = make([]treewalk.Entry, 0, min(opt.WalkHint+opt.WalkHint/8+64, opt.MaxEntries))
		} else {
			s.walk.Entries = make([]treewalk.Entry, 0, walkChunk)
		}
	}
	if opt.SkipKernelMounts {
		s.pseudo = findPseudoMounts(s.repo) // audit_pseudo_linux.go
	}
	s.pre = newPrefetcher(opt.MaxEntries, s.launch)
	skipped := len(s.surface.Skipped)
	s.tree(s.repo, 0)
	s.pre.stop() // nothing reads the tree after this
	s.pre = nil
	if s.launch != nil && len(s.surface.Skipped) > skipped {
		// A directory of the tree the launch did not read (unopenable, too deep,
		// past the bound) has no mark: a hard link made in it to a file of a
		// watched directory, and whatever is written through that link, reach no
		// mark (audit_since_linux.go).
		s.launch.watch.Fail("the launch scan left part of the tree unwatched: " + s.surface.Skipped[skipped].Path)
	}
	if s.walk != nil && len(s.chunks) > 0 {
		n := len(s.walk.Entries)
		for _, c := range s.chunks {
			n += len(c)
		}
		all := make([]treewalk.Entry, 0, n)
		for _, c := range s.chunks {
			all = append(all, c...)
		}
		s.walk.Entries, s.chunks = append(all, s.walk.Entries...), nil
	}
	if s.walk != nil && s.stopped {
		s.walk.Complete = false
	}
	if s.sharing {
		// Every listing was the launch's, unchanged: so is the walk, entry for
		// entry (audit_since_linux.go). Anything else is a fault of this code;
		// the scan is then made again without the watch.
		if s.shared != len(s.since.entries) || s.unshared != 0 || !s.walk.Complete || len(s.walk.Entries) != 0 {
			opt.Since = nil
			return Scan(repo, opt)
		}
		s.walk.Entries = s.since.entries
		s.surface.shared = true
	}
	if s.launch != nil && s.walk != nil {
		s.launch.dropOutsideLinks()
		s.launch.keepWalk(s.walk, s.listed)
	}
	for _, g := range s.opt.GitDirs {
		s.gitdir(filepath.Clean(g), "", 0)
	}
	return s.surface, nil
}

type scanner struct {
	repo        string
	opt         ScanOptions
	surface     *Surface
	entries     int
	stopped     bool              // the entry bound was hit
	hostEntries []gitconfig.Entry // the host configs with their includes, read once
	gitdirs     map[string]bool
	configs     map[string][]gitconfig.Entry // config files read, with their entries
	expanded    map[string]expansion         // config files whose includes were followed
	hooks       map[string]bool
	pseudo      map[string]string // mounts of kernel filesystems in the tree, not walked
	walk        *treewalk.Walk    // nil unless opt.Walk
	nested      int               // >0 while below a nested repository (not listed in walk)
	pre         *prefetcher       // lists the tree's directories ahead while tree runs
	launch      *Launch           // with opt.Watch: the watch, and the listings kept for the end scan
	since       *Launch           // opt.Since, when its watch vouches for anything
	fromLaunch  map[string]bool   // with since: the directories whose launch listing was taken
	verified    map[string]bool   // with since: subdirectories found to be the launch's (verifySubdirs)
	touched     map[*keptDir]bool // with since: kept listings holding an inode an event was about (reusable)
	sharing     bool              // with since: nothing changed, the walk is the launch's (shared counts its entries)
	shared      int
	unshared    int // with sharing: entries of directories read again, not taken
	listed      int // directories read (or taken) by readDirStat
	// chunks are the walk's first entries, in full blocks of walkChunk, when no
	// WalkHint sized walk.Entries: the list grows by blocks, not by copies of
	// itself (Go grows a large slice by a quarter: 20 MB allocated and copied for
	// the 4 MB of 100,000 entries), and is joined once at the end.
	chunks [][]treewalk.Entry
}

func (s *scanner) skip(path, format string, args ...any) {
	s.surface.Skipped = append(s.surface.Skipped, Skip{Path: path, Reason: fmt.Sprintf(format, args...)})
}

func (s *scanner) add(it *Item) *Item {
	if old := s.surface.Items[it.Path]; old != nil {
		old.Dangers = appendNew(old.Dangers, it.Dangers...)
		return old
	}
	s.surface.Items[it.Path] = it
	return it
}

// linkItem records the symlink at p.
func (s *scanner) linkItem(p string, kind ItemKind) *Item {
	link, _ := os.Readlink(p)
	return s.add(&Item{Path: p, Kind: kind, Sum: "link:" + link, Link: link,
		Watch: fmt.Sprintf("symlink to %s in Git's exec surface", oneLine(link))})
}

func appendNew(list []string, more ...string) []string {
	for _, m := range more {
		dup := false
		for _, l := range list {
			dup = dup || l == m
		}
		if !dup {
			list = append(list, m)
		}
	}
	return list
}

// readDir lists dir (a canonical path) without following symlinks, sorted by name.
// Failures are recorded as skipped places.
func (s *scanner) readDir(dir string) []os.DirEntry {
	fd, err := safepath.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		s.skip(dir, "cannot open directory: %v", err)
		return nil
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	return s.readDirBatches(f.ReadDir, dir)
}

// readDirBatches lists a directory (at dir) by next, which is os.File.ReadDir or
// a direntReader's, sorted by name.
func (s *scanner) readDirBatches(next func(int) ([]os.DirEntry, error), dir string) []os.DirEntry {
	// Read in batches so that one huge directory cannot exhaust memory before the
	// entry bound is checked.
	var ents []os.DirEntry
	for {
		batch, err := next(4096)
		ents = append(ents, batch...)
		s.entries += len(batch)
		if errors.Is(err, io.EOF) || err == nil && len(batch) == 0 {
			break
		}
		if err != nil {
			s.skip(dir, "cannot list directory: %v", err)
			break
		}
		if s.entries >= s.opt.MaxEntries {
			s.stopped = true
			s.skip(dir, "walk stopped after %d entries while listing this directory; the rest of it and of the tree were not searched", s.entries)
			break
		}
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	return ents
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
	s.verifySubdirs(dir, subdirs) // audit_since_linux.go
	if looksLikeGitDir(ents) {
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
				if s.since == nil || s.reusable(sub, stat) == nil {
					s.pre.schedule(sub, stat)
				}
			}
		}
	}
	// An entry's absolute path is made only for what the loop acts on: the walk
	// keeps the short relative one (100,000 absolute paths were 10 MB of fresh
	// heap per walk, and fresh pages fault at several µs each on a VM).
	var rels []string
	if stats != nil && s.nested == 0 {
		rels = s.walkRels(dir, ents) // audit_since_linux.go
	}
	for i, e := range ents {
		name := e.Name()
		if stats != nil && s.nested == 0 && name != ".git" {
			st := stats[i]
			rel := rels[i]
			s.walk.FineCtime = s.walk.FineCtime || st.ctime%1_000_000_000 != 0
			switch {
			case s.sharing && s.fromLaunch[dir]:
				s.shared++
			case s.sharing:
				// Read again, not taken: whatever it holds, the launch's walk
				// does not stand for it, even at the same count.
				s.unshared++
			case len(s.walk.Entries) == cap(s.walk.Entries) && len(s.walk.Entries) >= walkChunk:
				s.chunks = append(s.chunks, s.walk.Entries)
				s.walk.Entries = make([]treewalk.Entry, 0, walkChunk)
				fallthrough
			default:
				s.walk.Entries = append(s.walk.Entries, treewalk.Entry{Rel: rel, Mode: st.mode, Ctime: st.ctime, Ino: st.ino})
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

// statParts is how many goroutines lstat one directory's entries: a system call
// costs 2–4 µs here and a tree has 100,000 of them, which the cores share (Git's
// status does the same with its preload-index threads).
const statParts = 4

// entryStat is what the walk keeps of an entry's lstat: 16 bytes, not 144, since a
// directory may hold up to MaxEntries of them.
type entryStat struct {
	mode  uint32 // st_mode & S_IFMT
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

// statAll lstat's each of ents in the directory fd into stats, on parts goroutines,
// and returns the subdirectories' identities and the entries with more than one
// name; ok is false when one failed.
func statAll(fd int, ents []os.DirEntry, stats []entryStat, parts int) (subdirs []subdirID, links []linkID, ok bool) {
	// found is what one goroutine found beside the stats, joined at the end.
	type found struct {
		subdirs []subdirID
		links   []linkID
	}
	one := func(lo, hi int, f *found) bool {
		ok := true
		var st unix.Stat_t
		for i := lo; i < hi; i++ {
			if lstatAt(fd, ents[i], &st) != nil { // audit_dirents_linux.go
				ok = false
				continue
			}
			stats[i] = entryStat{mode: st.Mode & unix.S_IFMT, ino: uint32(st.Ino), ctime: st.Ctim.Nano()}
			if stats[i].mode == unix.S_IFDIR {
				f.subdirs = append(f.subdirs, subdirID{name: ents[i].Name(), dev: st.Dev, ino: st.Ino})
			} else if st.Nlink > 1 {
				f.links = append(f.links, linkID{dev: st.Dev, ino: st.Ino, nlink: uint64(st.Nlink)})
			}
		}
		return ok
	}
	n := len(ents)
	if n < 32 || parts <= 1 {
		var f found
		ok := one(0, n, &f)
		return f.subdirs, f.links, ok
	}
	var wg sync.WaitGroup
	var failed atomic.Bool
	all := make([]found, parts)
	for k := 1; k < parts; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !one(k*n/parts, (k+1)*n/parts, &all[k]) {
				failed.Store(true)
			}
		}()
	}
	ok = one(0, n/parts, &all[0])
	wg.Wait()
	for _, f := range all {
		subdirs, links = append(subdirs, f.subdirs...), append(links, f.links...)
	}
	return subdirs, links, ok && !failed.Load()
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
	if l := s.pre.take(dir, stat); l != nil { // audit_prefetch_linux.go
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
	fd, err := safepath.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		s.skip(dir, "cannot open directory: %v", err)
		if stat {
			s.walk.Complete = false
		}
		return nil, nil, nil
	}
	defer unix.Close(fd)
	watched := s.launch.watchDir(fd)
	ents = s.readDirBatches((&direntReader{fd: fd}).next, dir) // audit_dirents_linux.go
	ok := true
	if stat {
		stats = make([]entryStat, len(ents))
		var links []linkID
		subdirs, links, ok = statAll(fd, ents, stats, statParts)
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

// dotGit handles a .git entry of the working-tree directory worktree.
func (s *scanner) dotGit(p, worktree string) {
	fi, err := os.Lstat(p)
	if err != nil {
		s.skip(p, "cannot inspect: %v", err)
		return
	}
	switch {
	case fi.IsDir():
		if s.launch != nil && p != filepath.Join(s.repo, ".git") {
			// A nested repository's gitdir is read afresh, but lies in the
			// sandbox's writable mount (the top's is a bind of its own): unmarked,
			// a hard link made in it would be unseen (audit_since_linux.go).
			s.launch.markTree(p)
		}
		s.gitdir(p, worktree, 0)
	case fi.Mode()&fs.ModeSymlink != 0:
		s.linkItem(p, KindGitPointer)
		if target, ok := s.resolveInside(p); ok {
			s.gitdir(target, worktree, 0)
		}
	case fi.Mode().IsRegular():
		data, sum, err := s.read(p, maxPointerSize)
		it := s.add(&Item{Path: p, Kind: KindGitPointer, Sum: sum})
		if err != nil {
			it.Dangers = appendNew(it.Dangers, fmt.Sprintf("cannot be read (%v)", err))
			return
		}
		target, ok := gitguard.ParseGitFile(data)
		if !ok {
			return // Git refuses a .git file without "gitdir: " and reads nothing
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(worktree, target)
		}
		if canon, ok := s.canonInside(target); ok {
			s.gitdir(canon, worktree, 0)
		} else {
			// A linked worktree or a submodule checkout used as the repository points
			// out legitimately; a new pointer out of it is what a sandbox would plant.
			it.Watch = fmt.Sprintf("points Git at %s, outside the repository", oneLine(target))
		}
	}
}

// gitdir audits one Git directory (canonical, inside repo). worktree is its working
// tree when known ("" for module and bare gitdirs), against which a relative
// core.hooksPath resolves.
func (s *scanner) gitdir(dir, worktree string, depth int) {
	if s.gitdirs[dir] {
		return
	}
	s.gitdirs[dir] = true
	if depth > gitguard.MaxModuleDepth {
		s.skip(dir, "Git directories nested deeper than %d (modules/, worktrees/, commondir) were not audited", gitguard.MaxModuleDepth)
		return
	}
	entries := s.config(filepath.Join(dir, "config"), dir, 0)
	entries = append(entries, s.config(filepath.Join(dir, "config.worktree"), dir, 0)...)
	base := worktree
	if base == "" {
		base = dir
	}
	s.hooksDir(filepath.Join(dir, "hooks"), base)
	if common := s.commonDir(dir, depth); common != "" {
		// A linked worktree runs with its common dir's config and hooks, from its own
		// working tree: a relative core.hooksPath there resolves against base.
		entries = append(entries, s.config(filepath.Join(common, "config"), common, 0)...)
		s.hooksDir(filepath.Join(common, "hooks"), base)
	}
	for _, e := range append(entries, s.hostEntries...) {
		switch {
		case e.NoValue || e.Value == "":
		case e.Section == "core" && e.Key == "hookspath":
			if p, ok := gitconfig.ExpandPath(e.Value, s.opt.Home); ok {
				if !filepath.IsAbs(p) {
					p = filepath.Join(base, p)
				}
				if canon, ok := s.canonInside(p); ok && canon != "" {
					s.hooksDir(canon, base)
				}
			}
		case gitconfig.IsInclude(e) || e.Section == "protocol":
		case Danger(e) != "":
			s.programs(e.Value, e.Name(), base)
		}
	}
	s.gitdirBlockers(dir)
	for _, todo := range []string{"rebase-merge/git-rebase-todo", "sequencer/todo"} {
		s.todo(filepath.Join(dir, todo))
	}
	s.stateFiles(dir) // audit_state_linux.go
	s.moduleDirs(filepath.Join(dir, "modules"), depth+1)
	for _, e := range s.listIfDir(filepath.Join(dir, "worktrees")) {
		if e.IsDir() {
			s.gitdir(filepath.Join(dir, "worktrees", e.Name()), "", depth+1)
		}
	}
}

// listIfDir lists path when it is a real directory; a missing one is fine, a symlink
// is not followed (Git would follow it, so it is reported when new).
func (s *scanner) listIfDir(path string) []os.DirEntry {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		s.skip(path, "cannot inspect: %v", err)
		return nil
	case fi.Mode()&fs.ModeSymlink != 0:
		s.linkItem(path, KindGitPointer)
		if target, ok := s.resolveInside(path); ok {
			return s.readDir(target)
		}
		return nil
	case !fi.IsDir():
		return nil
	}
	return s.readDir(path)
}

// moduleDirs visits each gitdir below modules/. Submodule names may hold slashes, so
// modules/a/b can be a gitdir even when modules/a is one too: every directory is
// searched, except the parts of a gitdir that hold no gitdirs of its own.
func (s *scanner) moduleDirs(dir string, depth int) {
	for _, e := range s.listIfDir(dir) {
		if e.IsDir() {
			s.moduleDir(filepath.Join(dir, e.Name()), depth)
		}
	}
}

func (s *scanner) moduleDir(p string, depth int) {
	if depth > gitguard.MaxModuleDepth {
		s.skip(p, "Git directories nested deeper than %d were not audited", gitguard.MaxModuleDepth)
		return
	}
	ents := s.readDir(p)
	isGitDir := false
	for _, c := range ents {
		switch c.Name() {
		case "HEAD", "config", "commondir":
			isGitDir = true
		}
	}
	if isGitDir {
		s.gitdir(p, "", depth)
	}
	for _, c := range ents {
		if c.IsDir() && !(isGitDir && gitdirInternal(c.Name())) {
			s.moduleDir(filepath.Join(p, c.Name()), depth+1)
		}
	}
}

// gitdirInternal reports whether name is a directory of a gitdir that never holds a submodule gitdir
// (gitdir() itself handles modules/ and worktrees/).
func gitdirInternal(name string) bool {
	switch name {
	case "objects", "refs", "logs", "hooks", "info", "modules", "worktrees", "lfs":
		return true
	}
	return false
}

// commonDir audits gitdir/commondir and returns the common dir it names ("" when
// none). Only a linked worktree's gitdir (X/worktrees/NAME) legitimately has one,
// pointing back at X; anywhere else, or pointing anywhere else, it moves Git's config
// and hooks.
func (s *scanner) commonDir(gitdir string, depth int) string {
	p := filepath.Join(gitdir, "commondir")
	it, data, ok := s.file(p, KindCommonDir, maxPointerSize)
	if !ok || data == nil {
		return ""
	}
	target, ok := gitguard.ParseCommonDir(gitdir, data)
	if !ok {
		return ""
	}
	canon, inside := s.canonInside(target)
	want := ""
	if filepath.Base(filepath.Dir(gitdir)) == "worktrees" {
		want = filepath.Dir(filepath.Dir(gitdir))
	}
	if want == "" || canon != want {
		it.Dangers = appendNew(it.Dangers, fmt.Sprintf("makes Git read config and hooks from %s", oneLine(target)))
	}
	if inside && canon != "" {
		s.gitdir(canon, "", depth+1)
	}
	return canon
}

// hooksDir audits a hooks directory: every entry Git could run (anything but
// *.sample) that is executable or a symlink. base is where the hooks run (the top of
// the working tree), against which the files a hook script names are resolved.
func (s *scanner) hooksDir(dir, base string) {
	if s.hooks[dir] {
		return
	}
	s.hooks[dir] = true
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return
	case err != nil:
		s.skip(dir, "cannot inspect: %v", err)
		return
	case fi.Mode()&fs.ModeSymlink != 0:
		s.linkItem(dir, KindHooksDir)
		if target, ok := s.resolveInside(dir); ok {
			s.hooksDir(target, base)
		}
		return
	case !fi.IsDir():
		return
	}
	for _, e := range s.readDir(dir) {
		if strings.HasSuffix(e.Name(), ".sample") || strings.Contains(e.Name(), QuarantineSuffix) {
			continue // Git runs hooks by their exact name only
		}
		p := filepath.Join(dir, e.Name())
		fi, err := e.Info()
		if err != nil {
			s.skip(p, "cannot inspect: %v", err)
			continue
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			link, _ := os.Readlink(p)
			s.add(&Item{Path: p, Kind: KindHook, Sum: "link:" + link, Link: link,
				Dangers: []string{fmt.Sprintf("hook %s links to %s, which Git would run", oneLine(e.Name()), oneLine(link))}})
		case fi.Mode().IsRegular():
			data, sum, err := s.read(p, maxHookHash)
			it := s.add(&Item{Path: p, Kind: KindHook, Sum: sum})
			if err != nil && !errors.Is(err, errTooLarge) {
				it.Sum = fmt.Sprintf("unreadable:%o:%d", fi.Mode(), fi.Size())
			}
			if fi.Mode()&0o111 != 0 {
				it.Dangers = []string{fmt.Sprintf("executable hook %s, which Git runs", oneLine(e.Name()))}
				if bytes.HasPrefix(data, []byte("#!")) && len(data) <= maxPointerSize {
					s.scriptPrograms(string(data), "hook "+e.Name(), base)
				}
			}
		}
	}
}

// programs records the files inside the repository that a command-valued config
// entry names literally (a token with a slash, relative to where Git runs it: the
// top of the working tree): the user's own "core.fsmonitor = scripts/fsmon.sh" is
// safe only as long as the sandbox does not rewrite scripts/fsmon.sh. Commands found
// through PATH, and files those programs read in turn, are beyond what the audit can
// know.
func (s *scanner) programs(value, runBy, base string) {
	for _, tok := range strings.FieldsFunc(value, func(r rune) bool {
		return r == ' ' || r == '\t' || r == '\n' || strings.ContainsRune(";|&()<>`'\"!=$", r)
	}) {
		if !strings.Contains(tok, "/") || strings.HasPrefix(tok, "-") {
			continue
		}
		p, ok := gitconfig.ExpandPath(tok, s.opt.Home)
		if !ok {
			continue
		}
		if !filepath.IsAbs(p) {
			p = filepath.Join(base, p)
		}
		canon, inside := s.canonInside(p)
		if !inside || canon == "" || s.gitdirs[canon] {
			continue
		}
		if fi, err := os.Lstat(canon); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		_, sum, err := s.read(canon, maxHookHash)
		if err != nil && !errors.Is(err, errTooLarge) {
			s.skip(canon, "cannot read the program %s runs: %v", runBy, err)
			continue
		}
		s.add(&Item{Path: canon, Kind: KindProgram, Sum: sum, Watch: fmt.Sprintf("program run by %s", runBy)})
	}
}

// scriptPrograms records the files inside the repository that a hook script names
// literally, outside comments: "exec scripts/pre-commit.sh" makes scripts/pre-commit.sh
// as much a hook as the hook itself.
func (s *scanner) scriptPrograms(script, runBy, base string) {
	for _, line := range strings.Split(script, "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
			s.programs(t, runBy, base)
		}
	}
}

// config audits a config file Git reads (when it lies inside repo) and the files it
// includes, to Git's depth bound, and returns the entries of all of them. gitdir is
// the Git directory the config belongs to, "" for a host config.
func (s *scanner) config(path, gitdir string, depth int) []gitconfig.Entry {
	if depth >= gitconfig.MaxIncludeDepth {
		return nil
	}
	// Each file's includes are expanded once per depth it is reached at, at most:
	// a file including itself many times must not make the audit work exponentially.
	key := gitdir + "\x00" + filepath.Clean(path)
	if v, seen := s.expanded[key]; seen && v.depth <= depth {
		return v.entries
	}
	s.expanded[key] = expansion{depth: depth}
	var entries []gitconfig.Entry
	if s.inside(filepath.Clean(path)) || gitdir != "" {
		entries = s.repoConfig(path, gitdir)
	} else if canon, missing := gitguard.Canonical(path); canon != "" && missing == "" {
		if s.inside(canon) {
			entries = s.repoConfig(canon, gitdir)
		} else {
			entries, _ = gitconfig.ReadHostFile(canon)
		}
	}
	all := entries
	for _, inc := range gitconfig.IncludePaths(entries, path, s.opt.Home) {
		all = append(all, s.config(inc, gitdir, depth+1)...)
	}
	s.expanded[key] = expansion{depth: depth, entries: all}
	return all
}

// expansion is a config file with its includes, as read at the given include depth.
type expansion struct {
	depth   int
	entries []gitconfig.Entry
}

// repoConfig records the config file at path (inside repo, or reached from a path
// inside it) and returns its entries; nil when it does not exist or is not read.
func (s *scanner) repoConfig(path, gitdir string) []gitconfig.Entry {
	parent, err := filepath.EvalSymlinks(filepath.Dir(path))
	if err != nil {
		return nil
	}
	p := filepath.Join(parent, filepath.Base(path))
	if !s.inside(p) {
		// The directory leads out of the repository: host files, read-only in the sandbox.
		entries, _ := gitconfig.ReadHostFile(p)
		return entries
	}
	if entries, seen := s.configs[p]; seen {
		return entries
	}
	s.configs[p] = nil
	it, data, ok := s.file(p, KindConfig, gitconfig.MaxFileSize)
	if !ok || data == nil {
		return nil
	}
	entries, err := gitconfig.Parse(bytes.NewReader(data))
	if err != nil {
		it.Dangers = appendNew(it.Dangers, fmt.Sprintf("cannot be parsed, so cannot be checked (%v)", err))
		return nil
	}
	s.configs[p] = entries
	for _, e := range entries {
		if why := Danger(e); why != "" {
			it.Dangers = appendNew(it.Dangers, describe(e, why))
		}
		if e.Section == "core" && e.Key == "worktree" && gitdir != "" && !e.NoValue {
			wt := e.Value
			if !filepath.IsAbs(wt) {
				wt = filepath.Join(gitdir, wt)
			}
			if _, inside := s.canonInside(wt); !inside {
				it.Dangers = appendNew(it.Dangers, describe(e, "points the working tree outside the repository; checkouts would write there"))
			}
		}
	}
	return entries
}

// gitmodules audits a .gitmodules file: submodule.*.update = !command. Current Git
// ignores that form in .gitmodules (CVE-2019-19604), older Git runs it.
func (s *scanner) gitmodules(p string) {
	it, data, ok := s.file(p, KindGitmodules, gitconfig.MaxFileSize)
	if !ok || data == nil {
		return
	}
	entries, err := gitconfig.Parse(bytes.NewReader(data))
	if err != nil {
		return // Git cannot read it either; a merge conflict in .gitmodules is ordinary
	}
	for _, e := range entries {
		if e.Section == "submodule" && e.Key == "update" && strings.HasPrefix(strings.TrimSpace(e.Value), "!") {
			it.Dangers = appendNew(it.Dangers, describe(e, "submodule update runs a shell command"))
		}
	}
}

// todo audits a sequencer todo list: "exec"/"x" lines run a shell command when the
// operator continues the rebase.
func (s *scanner) todo(p string) {
	it, data, ok := s.file(p, KindTodo, gitconfig.MaxFileSize)
	if !ok || data == nil {
		return
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), gitconfig.MaxFileSize)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 1 && (f[0] == "exec" || f[0] == "x") {
			cmd := strings.Join(f[1:], " ")
			if len(cmd) > 120 {
				cmd = cmd[:120] + "…"
			}
			it.Dangers = appendNew(it.Dangers, fmt.Sprintf("runs %q when the rebase continues", cmd))
		}
	}
}

// file records the file at p (whose parent is canonical) as an item of kind and
// returns its content when it is a regular file inside repo (through a symlink that
// stays inside, too). ok is false when p does not exist. data is nil when the content
// was not read; a file Git would read but the audit cannot is marked dangerous.
func (s *scanner) file(p string, kind ItemKind, limit int64) (it *Item, data []byte, ok bool) {
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, false
	}
	if err != nil {
		s.skip(p, "cannot inspect: %v", err)
		return nil, nil, false
	}
	src := p
	it = &Item{Path: p, Kind: kind}
	if fi.Mode()&fs.ModeSymlink != 0 {
		it = s.linkItem(p, kind)
		target, inside := s.resolveInside(p)
		if !inside {
			return it, nil, true // not read: it leads out of the repository
		}
		src = target
	}
	d, sum, err := s.read(src, limit)
	it.Sum += ":" + sum
	it = s.add(it)
	if err != nil {
		it.Dangers = appendNew(it.Dangers, fmt.Sprintf("cannot be read, so cannot be checked (%v)", err))
		return it, nil, true
	}
	return it, d, true
}

var errTooLarge = errors.New("too large")

// read returns the content of the regular file at canonical path p (up to limit
// bytes) and its fingerprint. It never follows a symlink and never blocks on a FIFO.
func (s *scanner) read(p string, limit int64) ([]byte, string, error) {
	fd, err := safepath.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return nil, "unopenable", err
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, "unstattable", err
	}
	if !fi.Mode().IsRegular() {
		return nil, "type:" + fi.Mode().Type().String(), fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	h := sha256.New()
	var buf bytes.Buffer
	n, err := io.Copy(io.MultiWriter(h, &buf), io.LimitReader(f, limit+1))
	if err != nil {
		return nil, "unreadable", err
	}
	sum := fmt.Sprintf("%o:%d:%s", fi.Mode().Perm(), fi.Size(), hex.EncodeToString(h.Sum(nil)))
	if n > limit {
		return nil, sum, fmt.Errorf("%w: more than %d bytes", errTooLarge, limit)
	}
	return buf.Bytes(), sum, nil
}

// inside reports whether p lies in the writable set: repo, or one of the writable
// gitdirs outside it.
func (s *scanner) inside(p string) bool {
	if policy.Within(p, s.repo) {
		return true
	}
	for _, g := range s.opt.GitDirs {
		if policy.Within(p, g) {
			return true
		}
	}
	return false
}

// resolveInside resolves the symlink at p and reports whether its target lies inside
// repo (only then may the audit read it).
func (s *scanner) resolveInside(p string) (string, bool) {
	t, err := filepath.EvalSymlinks(p)
	if err != nil || !s.inside(t) {
		return "", false
	}
	return t, true
}

// canonInside resolves path (which may not exist) and reports whether it lies inside
// repo; when it exists, the canonical path is returned.
func (s *scanner) canonInside(path string) (string, bool) {
	canon, missing := gitguard.Canonical(path)
	if canon == "" {
		return "", s.inside(filepath.Clean(path))
	}
	if missing != "" {
		return "", s.inside(canon)
	}
	return canon, s.inside(canon)
}
