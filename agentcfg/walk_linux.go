package agentcfg

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/widen"
)

// maxWalk bounds the entries the audit looks at in the agents' kept directories,
// data paths included; what lies beyond is not audited, and fails the session
// (a variable for the tests).
var maxWalk = 200000

// maxDepth bounds how deep the walk goes below a kept part of an agent's
// directory; a directory deeper is not audited, and fails the session.
const maxDepth = 64

// auto: the format is decided from the file's name, mode and first bytes when it
// is read (formatOf), each time: a file that became executable becomes code.
const auto format = -1

type coveredFile struct {
	path string
	f    format
}

// covered lists the files the audit covers for these kept paths: the known files
// in them, and every file in the part of an agent's directory that they keep —
// in its data paths only the symlinks and special files. over is set when a walk
// stopped at maxWalk; blind are the directories it could not list (Unresolved).
// r widens what the session made unlistable.
func (o Options) covered(r *widen.Relaxer) (list []coveredFile, over bool, blind []Finding, shared []dirID) {
	seen := map[string]bool{}
	addf := func(p string, f format) {
		if !seen[p] {
			seen[p] = true
			list = append(list, coveredFile{p, f})
		}
	}
	hl := o.homeLinks()
	for _, k := range known {
		for _, p := range o.linkedInto(filepath.Join(o.Home, k.rel), hl) {
			addf(p, k.f)
		}
	}
	// zsh reads its start-up files from $ZDOTDIR (~/.config/zsh is common): a kept
	// path there holds them as ~ would.
	if z := o.AgentDirs[zdotdirKey]; filepath.IsAbs(z) {
		for _, n := range zshFiles {
			for _, p := range o.linkedInto(filepath.Join(filepath.Clean(z), n), hl) {
				addf(p, wholeFile)
			}
		}
	}
	budget := maxWalk
	scopes := o.scopes(hl)
	for _, s := range scopes {
		w := walker{o: o, a: s.a, dir: s.dir, add: addf, budget: &budget, relax: r}
		w.walk(s.root)
		over = over || w.over
		blind = append(blind, w.blind...)
		shared = append(shared, w.shared...)
	}
	blind = append(blind, o.outLinks(r, addf, scopes)...)
	return list, over, blind, shared
}

// relaxer widens, below the kept paths, what the session made unreadable; with
// the owner's write, for the put back to move entries out and rewrite kept files.
func (o Options) relaxer() *widen.Relaxer {
	return &widen.Relaxer{Roots: o.Kept, DirBits: 0o700, FileBits: 0o600, Journal: o.WidenJournal}
}

type scope struct {
	a         agentDir
	dir, root string // the agent's directory; where the kept part of it begins
}

// scopes are the kept parts of the agents' directories: a kept path that is or
// holds one, or lies in one.
func (o Options) scopes(hl *homeLinks) []scope {
	var out []scope
	for _, a := range append(agentDirs[:len(agentDirs):len(agentDirs)], startDirs...) {
		dirs := []string{filepath.Join(o.Home, a.rel)}
		if d := o.AgentDirs[a.agent]; d != "" && filepath.IsAbs(d) {
			dirs = append(dirs, filepath.Clean(d))
		}
		for _, d := range dirs[:len(dirs):len(dirs)] {
			for _, h := range o.linkedInto(d, hl) {
				if !slices.Contains(dirs, h) {
					dirs = append(dirs, h) // linked elsewhere: a kept path may hold it there
				}
			}
		}
		for _, d := range dirs {
			for _, k := range o.Kept {
				switch {
				case within(d, k):
					out = append(out, scope{a, d, d})
				case within(k, d):
					out = append(out, scope{a, d, k})
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].root < out[j].root })
	var dedup []scope
	for _, s := range out {
		if n := len(dedup); n > 0 && within(s.root, dedup[n-1].root) {
			continue
		}
		dedup = append(dedup, s)
	}
	return dedup
}

// maxLinkHops bounds hostPath, as the kernel bounds a path's symlinks.
const maxLinkHops = 40

// hostPath is p with the symlinks of its part outside the kept paths resolved, the
// path the operator's programs reach for p; the part from the first kept prefix on
// is left as it is (the session may change links there, the audit looks at them).
// A dotfiles checkout is the case: with ~/.zshrc -> src/dotfiles/zshrc, or
// ~/.config/fish -> ../src/dotfiles/fish, and --keep ~/src/dotfiles, the session
// writes what the next shell runs. "" when the links go round or the path is
// missing outside the kept paths.
//
// HOME is canonical, so a path below it is looked at from HOME on; a component
// that does not exist ends the look (no kept path lies below it): a readlink costs
// 2-10 µs here, and covered asks this of some fifty paths.
func (o Options) hostPath(p string, hl *homeLinks) string {
	cur, rest := "/", filepath.Clean(p)
	if r, ok := strings.CutPrefix(rest, o.Home+"/"); ok && o.Home != "" && !o.kept(o.Home) {
		cur, rest = o.Home, r
	}
	return o.follow(cur, strings.Split(strings.TrimPrefix(rest, "/"), "/"), hl, true)
}

// follow resolves the symlinks of the path cur/parts from cur on (cur has none):
// with atKept, up to the first component in a kept path, the rest left as it is,
// and "" at a missing component; without, through the kept paths too, a missing
// component ending the look with the rest as it is. "" when the links go round.
func (o Options) follow(cur string, parts []string, hl *homeLinks, atKept bool) string {
	for hops := 0; len(parts) > 0; {
		next := filepath.Join(cur, parts[0])
		if atKept && o.kept(next) {
			return filepath.Join(append([]string{next}, parts[1:]...)...)
		}
		li := hl.readlink(next)
		if li.missing {
			if atKept {
				return ""
			}
			return filepath.Join(append([]string{next}, parts[1:]...)...)
		}
		if !li.link {
			cur, parts = next, parts[1:] // no link: the host's, as it is
			continue
		}
		t := li.target
		if hops++; hops > maxLinkHops {
			return ""
		}
		if !filepath.IsAbs(t) {
			t = filepath.Join(cur, t)
		}
		parts = append(strings.Split(strings.TrimPrefix(filepath.Clean(t), "/"), "/"), parts[1:]...)
		cur = "/"
	}
	return cur
}

// homeLinks remembers, for one listing of the audited files, what hostPath found
// at each path: whether it is a symlink (and its target) or missing. HOME is
// listed once up front, which spares a readlink for each of its entries; the
// paths below them are asked once each. A nil homeLinks asks every time.
type homeLinks struct {
	home   string
	listed bool            // HOME's entries are in seen, or links: another name is missing
	links  map[string]bool // HOME's entries that are symlinks (read when asked)
	seen   map[string]linkInfo
}

type linkInfo struct {
	target        string
	link, missing bool
}

func (o Options) homeLinks() *homeLinks {
	hl := &homeLinks{home: o.Home, seen: map[string]linkInfo{}, links: map[string]bool{}}
	ents, err := os.ReadDir(o.Home)
	if err != nil || o.Home == "" {
		return hl
	}
	hl.listed = true
	for _, e := range ents {
		if e.Type()&fs.ModeSymlink != 0 {
			hl.links[e.Name()] = true
		} else {
			hl.seen[filepath.Join(o.Home, e.Name())] = linkInfo{}
		}
	}
	return hl
}

// readlink is what p is: a symlink to target, missing, or neither.
func (hl *homeLinks) readlink(p string) linkInfo {
	if hl == nil {
		t, err := os.Readlink(p)
		return linkInfo{target: t, link: err == nil, missing: errors.Is(err, fs.ErrNotExist)}
	}
	if li, ok := hl.seen[p]; ok {
		return li
	}
	if hl.listed && filepath.Dir(p) == hl.home && !hl.links[filepath.Base(p)] {
		return linkInfo{missing: true} // not in HOME's listing
	}
	t, err := os.Readlink(p)
	li := linkInfo{target: t, link: err == nil, missing: errors.Is(err, fs.ErrNotExist)}
	hl.seen[p] = li
	return li
}

// linkedInto is where p lies in the kept paths: hostPath(p) when it lies in one,
// and, when symlinks inside the kept paths lie on its way on, where they lead now
// when that is in a kept path too. hostPath leaves those links as they are, since
// the session may change them: the audit watches the path as the operator's
// programs name it (a link replaced by a directory is a change there) and the
// file the link leads to at the audit (~/.config/zsh -> ../dotfiles/zsh with
// both kept: the .zshrc in dotfiles is what the next shell runs).
func (o Options) linkedInto(p string, hl *homeLinks) []string {
	h := o.hostPath(p, hl)
	if h == "" || !o.kept(h) {
		return nil
	}
	out := []string{h}
	// The kept paths are canonical: only the part below the one holding h can
	// hold links. A missing file (a start-up file not written yet) is taken where
	// its directory leads.
	root := ""
	for _, k := range o.Kept {
		if within(h, k) && len(k) > len(root) {
			root = k
		}
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(h, root), "/")
	if rel == "" {
		return out
	}
	if r := o.follow(root, strings.Split(rel, "/"), hl, false); r != "" && r != h && o.kept(r) {
		out = append(out, r)
	}
	return out
}

func within(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

func (o Options) kept(p string) bool {
	for _, k := range o.Kept {
		if within(p, k) {
			return true
		}
	}
	return false
}

// skipped: a directory bound read-only or private inside, whose host files the
// session cannot change.
func (o Options) skipped(p string) bool {
	for _, s := range o.Skip {
		if within(p, s) {
			return true
		}
	}
	return false
}

type walker struct {
	o      Options
	a      agentDir
	dir    string
	add    func(string, format)
	budget *int
	over   bool
	relax  *widen.Relaxer
	blind  []Finding // directories it could not list
	shared []dirID   // directories others may write (sharedWrite)
	// links: only symlinks are added (outlinks_linux.go), and no directory is
	// recorded in shared; exclude are subtrees it does not enter.
	links   bool
	exclude []string
}

// dirID is a directory the walk listed, by path and identity.
type dirID struct {
	path     string
	dev, ino uint64
}

// sharedWrite: a file or directory of these mode bits and group is writable by
// someone other than the launching user: by all, or by a group that is not the
// user's own. Group write within the user's own group is what umask 002 gives on
// systems with a private group per user, and is left to the user.
func sharedWrite(mode, gid uint32) bool {
	return mode&0o002 != 0 || mode&0o020 != 0 && int(gid) != os.Getegid()
}

// walk lists path and what lies below it, never following a symlink.
func (w *walker) walk(path string) {
	var st unix.Stat_t
	err := unix.Lstat(path, &st)
	if errors.Is(err, unix.EACCES) && w.relax.Widen(filepath.Dir(path)) {
		err = unix.Lstat(path, &st)
	}
	if err != nil {
		return
	}
	data := w.isData(w.rel(path), false)
	if w.links && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			w.add(path, outLink)
		}
		return
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		w.file(path, st.Mode&unix.S_IFMT == unix.S_IFREG, data)
		return
	}
	fd, err := w.relax.Open(path, unix.O_RDONLY|unix.O_DIRECTORY)
	switch {
	case errors.Is(err, unix.EACCES):
		w.blindDir(path, err)
	case err != nil:
		w.add(path, auto) // read reports what it is instead
	default:
		w.dirAt(fd, path, 0, data)
	}
}

// openDir opens the directory name in the open directory fd (its path p), widening
// the owner's modes where the session made it unlistable.
func (w *walker) openDir(fd int, name, p string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	dfd, err := unix.Openat(fd, name, flags, 0)
	if errors.Is(err, unix.EACCES) && w.relax.Widen(p) {
		dfd, err = unix.Openat(fd, name, flags, 0)
	}
	return dfd, err
}

// blindDir records a directory the walk could not list, unless the launching user
// cannot enter it: then neither could the sandbox, nor can an agent run as the user.
func (w *walker) blindDir(p string, err error) {
	var st unix.Stat_t
	if err != nil && unix.Lstat(p, &st) == nil && int(st.Uid) != os.Geteuid() &&
		errors.Is(unix.Faccessat(unix.AT_FDCWD, p, unix.X_OK, unix.AT_EACCESS|unix.AT_SYMLINK_NOFOLLOW), unix.EACCES) {
		return
	}
	why := fmt.Sprintf("more than %d directories deep", maxDepth)
	if err != nil {
		why = "unreadable (" + err.Error() + ")"
	}
	w.blind = append(w.blind, Finding{Path: p, What: "not audited: " + why, Unresolved: true})
}

// dirAt walks the open directory fd (closed here); data: it lies in a data path.
// The entries' types come from the directory itself (getdents), so a data path
// costs no stat per file.
func (w *walker) dirAt(fd int, path string, depth int, data bool) {
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil && !w.links && int(st.Uid) == os.Geteuid() && sharedWrite(st.Mode&0o7777, st.Gid) {
		w.shared = append(w.shared, dirID{path, st.Dev, st.Ino})
	}
	ents, err := f.ReadDir(-1)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	for _, e := range ents {
		if *w.budget--; *w.budget < 0 {
			w.over = true
			return
		}
		p := filepath.Join(path, e.Name())
		if w.o.skipped(p) || slices.ContainsFunc(w.exclude, func(x string) bool { return within(p, x) }) {
			continue
		}
		if w.links && !e.IsDir() {
			if e.Type()&fs.ModeSymlink != 0 {
				w.add(p, outLink)
			}
			continue
		}
		sub := w.isData(w.rel(p), data)
		if e.IsDir() {
			if depth >= maxDepth {
				w.blindDir(p, nil)
				continue
			}
			dfd, err := w.openDir(fd, e.Name(), p)
			switch {
			case err == nil:
				w.dirAt(dfd, p, depth+1, sub)
			case errors.Is(err, unix.EACCES):
				w.blindDir(p, err)
			case !errors.Is(err, unix.ENOENT):
				w.file(p, false, sub) // no longer a directory: read says what it is
			}
			continue
		}
		w.file(p, e.Type().IsRegular(), sub)
	}
}

// isData: rel lies in a data path (or below one, inherited), and not in what a data
// path holds that the agent loads as instructions (otherMemory).
func (w *walker) isData(rel string, inherited bool) bool {
	return (inherited || w.a.isData(rel)) && !w.a.otherMemory(rel, w.o.Repo)
}

func (w *walker) rel(p string) string {
	return strings.TrimPrefix(strings.TrimPrefix(p, w.dir), "/")
}

func (w *walker) file(p string, regular, data bool) {
	switch {
	case data:
		if !regular {
			w.add(p, opaque)
		}
	case w.a.isWhole(w.rel(p)) || w.a.otherMemory(w.rel(p), w.o.Repo):
		w.add(p, wholeFile)
	case w.rel(p) == w.a.login:
		w.add(p, w.a.loginF)
	default:
		w.add(p, auto)
	}
}

// overFinding says that a kept directory was too large to be audited whole.
func (o Options) overFinding() Finding {
	var roots []string
	for _, s := range o.scopes(o.homeLinks()) {
		roots = append(roots, s.root)
	}
	return Finding{Path: strings.Join(roots, ", "), What: fmt.Sprintf("more than %d entries: not audited beyond them", maxWalk), Unresolved: true}
}
