package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/gitguard"
	"github.com/agentbox/agentbox/gitguard/gitconfig"
	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/treewalk"
)

const (
	defaultMaxEntries = 2_000_000
	defaultMaxDepth   = 256
	// defaultMaxConfigEntries is far above what real repositories hold (a thousand
	// submodules of a few dozen entries each) and keeps what the scan holds of
	// configs to a few hundred MB.
	defaultMaxConfigEntries = 1 << 21
	maxPointerSize          = 64 << 10 // a .git file or commondir is one line
	maxHookHash             = 64 << 20 // hooks may be binaries; hash at most this much
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
	var now string
	var err error
	removed := opt.GitDirsOnly
	if !removed {
		repo, now, err = top(repo, opt.Held) // audit_held_linux.go
		removed = errors.Is(err, errRemoved)
	}
	if err != nil && !removed {
		return nil, err
	}
	launchDirs := opt.GitDirs
	dirs, holds, movedDirs, err := heldGitDirs(opt)
	if err != nil {
		return nil, err
	}
	opt.GitDirs = dirs
	if removed {
		return removedScan(repo, opt, holds, movedDirs)
	}
	if now != repo {
		// Moved: the launch's listings are of paths it no longer has.
		opt.Since = nil
	}
	s := newScanner(repo, now, opt)
	s.hold(holds, movedDirs)
	opt = s.opt
	opt.GitDirs = launchDirs // for a scan made again, which finds them anew
	defer s.relax.Restore()  // audit_unreadable_linux.go
	for _, f := range opt.HostConfigs {
		s.hostEntries = append(s.hostEntries, s.config(f, "", 0)...)
	}
	if opt.Walk {
		// The clock before the top's lstat, as before every other entry's.
		s.walk = &treewalk.Walk{Clock: treewalk.Now(), Complete: true}
		var st unix.Stat_t
		if err := s.lstatTop(&st); err == nil {
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
		s.since, s.fromLaunch, s.verified, s.touched = opt.Since, map[string]bool{}, map[string]bool{}, map[*keptDir][]int{}
		if s.walk != nil {
			// audit_since_linux.go: the lstat's taken from the launch were read
			// after its clock, not this one.
			s.walk.Clock = opt.Since.clock
			if s.sharing = opt.Since.unchanged(); s.sharing {
				// The walk stays empty: it is the launch's.
			} else if e := opt.Since.entries; cap(e) > 0 {
				// Something changed: the walk is built entry by entry, in the
				// launch walk's list, whose pages are in already, so the end
				// scan faults in no fresh heap for its list. The launch
				// walk is no one's after this (ScanOptions.Since), and the
				// Launch no longer offers it for sharing.
				s.walk.Entries, opt.Since.entries = e[:0], nil
			}
		}
	}
	s.sizeWalk(opt.WalkHint)
	if opt.SkipKernelMounts {
		s.pseudo = findPseudoMounts(s.repo) // audit_pseudo_linux.go
	}
	s.pre = s.prefetcher()
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
	s.joinChunks()
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
	if again, moved := s.movedAgain(); moved {
		// Symlinks were resolved, and findings would be reported, at a path it
		// no longer has.
		if opt.moves++; opt.moves < maxMoves {
			opt.Since = nil // read whole: this scan may have taken the launch's walk list
			return Scan(repo, opt)
		}
		return nil, fmt.Errorf("audit %s: moved again and again while it was audited (now %s)", repo, oneLine(again))
	}
	return s.surface, nil
}

// prefetcher starts the workers that list the scan's directories ahead
// (audit_prefetch_linux.go).
func (s *scanner) prefetcher() *prefetcher {
	var held func(string, int) (int, error)
	if s.held != nil {
		held = s.openPath
	}
	// A scan that reads the whole tree (none of it taken from a launch) of a
	// size known from the walk it is to hold: its first ring is made at once,
	// since the ring's setup is earned back many times over. Waiting for
	// ringAfterEntries listed put the first 4,096 lstats of the launch walk on
	// fstatat, a fifth of the 20,000-file tree's, at about 1.4 times a ring's
	// CPU each (docs/performance.md, "the launch walk on 20,000 files").
	big := s.opt.Walk && s.since == nil && s.opt.WalkHint >= ringAfterEntries
	// The workers go down the tree on their own only when the scan takes
	// nothing from a launch: which of its directories an end scan reads again
	// is the scan's to decide (reusable).
	return newPrefetcher(prefetchConfig{maxEntries: s.opt.MaxEntries, launch: s.launch, held: held, big: big,
		ahead: s.since == nil, maxDepth: s.opt.MaxDepth, pseudo: s.pseudo})
}

// sizeWalk allocates the walk's list, for hint entries (ScanOptions.WalkHint).
func (s *scanner) sizeWalk(hint int) {
	if s.walk != nil && !s.sharing && s.walk.Entries == nil {
		// Not before: an end scan whose walk is the launch's, or is built in
		// the launch walk's list, would allocate a list of WalkHint entries
		// (the session's end scan passes the launch walk's length) only to drop
		// it, memory that, once the collector has freed the launch's garbage
		// during the command, is zeroed and faulted in for nothing.
		if hint > 0 {
			s.walk.Entries = make([]treewalk.Entry, 0, min(hint+hint/8+64, s.opt.MaxEntries))
		} else {
			s.walk.Entries = make([]treewalk.Entry, 0, walkChunk)
		}
	}
}

// lstatTop lstat's the top of the tree: the held directory itself, when there is one.
func (s *scanner) lstatTop(st *unix.Stat_t) error {
	if s.held != nil {
		return unix.Fstat(s.held.fd, st)
	}
	return unix.Lstat(s.repo, st)
}

// newScanner is a scan of repo, which lies at now (ScanOptions.Held), with the
// bounds' defaults filled in. The scan's paths are below now: an absolute path
// a file names below repo leads, for the user's Git, to whatever lies there now.
func newScanner(repo, now string, opt ScanOptions) *scanner {
	if opt.MaxEntries <= 0 {
		opt.MaxEntries = defaultMaxEntries
	}
	if opt.MaxDepth <= 0 {
		opt.MaxDepth = defaultMaxDepth
	}
	if opt.MaxConfigEntries <= 0 {
		opt.MaxConfigEntries = defaultMaxConfigEntries
	}
	s := &scanner{
		repo: filepath.Clean(now),
		opt:  opt,
		surface: &Surface{Repo: repo, Now: now, Items: map[string]*Item{},
			place: place{roots: roots(now, opt.GitDirs), journal: opt.WidenJournal}},
		held:     opt.Held,
		gitdirs:  map[string]bool{},
		configs:  map[string][]gitconfig.Entry{},
		expanded: map[string]expansion{},
		hooks:    map[string]bool{},
	}
	if opt.Held != nil {
		s.surface.holds = []heldAt{{h: opt.Held, now: s.repo}}
	}
	s.relax = s.surface.relaxer()
	return s
}

// hold adds the held GitDirs, where they lie now (heldGitDirs), to the scan.
func (s *scanner) hold(holds []heldAt, moved map[string]string) {
	s.surface.holds = append(s.surface.holds, holds...)
	s.surface.MovedGitDirs = moved
	s.relax = s.surface.relaxer()
}

// removedScan is the scan when the held repository was removed (it was empty
// then), or is not to be read (GitDirsOnly): its GitDirs are audited all the same,
// the held ones wherever they lie now.
func removedScan(repo string, opt ScanOptions, holds []heldAt, moved map[string]string) (*Surface, error) {
	opt.Held, opt.Walk, opt.Watch, opt.Since = nil, false, false, nil
	s := newScanner(repo, repo, opt)
	s.hold(holds, moved)
	s.surface.Now, s.surface.Removed = "", true
	defer s.relax.Restore()
	for _, f := range opt.HostConfigs {
		s.hostEntries = append(s.hostEntries, s.config(f, "", 0)...)
	}
	for _, g := range opt.GitDirs {
		s.gitdir(g, "", 0)
	}
	if again, moved := s.movedAgain(); moved {
		return nil, fmt.Errorf("audit %s: a Git directory was moved while it was audited (now %s)", repo, oneLine(again))
	}
	return s.surface, nil
}

// joinChunks puts the walk's entries in one list, the full chunks first.
func (s *scanner) joinChunks() {
	if s.walk == nil || len(s.chunks) == 0 {
		return
	}
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
	pseudo      map[string]string  // mounts of kernel filesystems in the tree, not walked
	walk        *treewalk.Walk     // nil unless opt.Walk
	nested      int                // >0 while below a nested repository (not listed in walk)
	pre         *prefetcher        // lists the tree's directories ahead while tree runs
	relax       *relaxer           // widens what the scan must read (audit_unreadable_linux.go)
	held        *Held              // opt.Held (audit_held_linux.go), which lies at repo now
	launch      *Launch            // with opt.Watch: the watch, and the listings kept for the end scan
	since       *Launch            // opt.Since, when its watch vouches for anything
	fromLaunch  map[string]bool    // with since: the directories whose launch listing was taken
	verified    map[string]bool    // with since: subdirectories found to be the launch's (verifySubdirs)
	touched     map[*keptDir][]int // with since: the entries of kept listings whose inode an event was about (reusable)
	sharing     bool               // with since: nothing changed, the walk is the launch's (shared counts its entries)
	shared      int
	unshared    int // with sharing: entries of directories read again, not taken
	listed      int // directories read (or taken) by readDirStat
	// chunks are the walk's first entries, in full blocks of walkChunk, when no
	// WalkHint sized walk.Entries: the list grows by blocks, not by copies of
	// itself (Go grows a large slice by a quarter, allocating and copying it many
	// times over), and is joined once at the end.
	chunks      [][]treewalk.Entry
	dangers     map[*Item]map[string]bool // each item's Dangers as a set (danger)
	configsOver bool                      // MaxConfigEntries was reached (configsSpent)
}

func (s *scanner) skip(path, format string, args ...any) {
	blind, stuck, why := s.blindSkip(path, args) // audit_unreadable_linux.go
	s.surface.Skipped = append(s.surface.Skipped, Skip{Path: path, Reason: fmt.Sprintf(format, args...) + why, Blind: blind, stuck: stuck})
}

func (s *scanner) add(it *Item) *Item {
	if old := s.surface.Items[it.Path]; old != nil {
		for _, d := range it.Dangers {
			s.danger(old, d)
		}
		return old
	}
	s.surface.Items[it.Path] = it
	return it
}

// linkItem records the symlink at p.
func (s *scanner) linkItem(p string, kind ItemKind) *Item {
	link := s.readlink(p)
	return s.add(&Item{Path: p, Kind: kind, Sum: "link:" + link, Link: link,
		Watch: fmt.Sprintf("symlink to %s in Git's exec surface", oneLine(link))})
}

// danger adds d to it's dangers once. The scan keeps a set of each item's beside
// the list: a file can give a danger per line (a config's, a todo list's, a
// remotes file's), and appendNew's scan made a million of them quadratic (100,000
// took 24 s; a 16 MiB config held the end audit for hours).
func (s *scanner) danger(it *Item, d string) {
	seen := s.dangers[it]
	if seen == nil {
		if s.dangers == nil {
			s.dangers = map[*Item]map[string]bool{}
		}
		seen = make(map[string]bool, len(it.Dangers)+1)
		for _, x := range it.Dangers {
			seen[x] = true
		}
		s.dangers[it] = seen
	}
	if !seen[d] {
		seen[d] = true
		it.Dangers = append(it.Dangers, d)
	}
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

// file records the file at p (whose parent is canonical) as an item of kind and
// returns its content when it is a regular file inside repo (through a symlink that
// stays inside, too). ok is false when p does not exist. data is nil when the content
// was not read; a file Git would read but the audit cannot is marked dangerous.
func (s *scanner) file(p string, kind ItemKind, limit int64) (it *Item, data []byte, ok bool) {
	fi, err := s.lstat(p)
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
	fd, err := s.relax.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
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
	if hostpath.Within(p, s.repo) {
		return true
	}
	for _, g := range s.opt.GitDirs {
		if hostpath.Within(p, g) {
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
