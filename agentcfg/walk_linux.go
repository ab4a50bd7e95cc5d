package agentcfg

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
)

// maxWalk bounds the entries the audit looks at in the agents' kept directories,
// data paths included; what lies beyond is reported, not audited.
const maxWalk = 200000

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
// stopped at maxWalk.
func (o Options) covered() (list []coveredFile, over bool) {
	seen := map[string]bool{}
	addf := func(p string, f format) {
		if !seen[p] {
			seen[p] = true
			list = append(list, coveredFile{p, f})
		}
	}
	for _, k := range known {
		if p := filepath.Join(o.Home, k.rel); o.kept(p) {
			addf(p, k.f)
		}
	}
	budget := maxWalk
	for _, s := range o.scopes() {
		w := walker{o: o, a: s.a, dir: s.dir, add: addf, budget: &budget}
		w.walk(s.root)
		over = over || w.over
	}
	return list, over
}

type scope struct {
	a         agentDir
	dir, root string // the agent's directory; where the kept part of it begins
}

// scopes are the kept parts of the agents' directories: a kept path that is or
// holds one, or lies in one.
func (o Options) scopes() []scope {
	var out []scope
	for _, a := range agentDirs {
		dirs := []string{filepath.Join(o.Home, a.rel)}
		if d := o.AgentDirs[a.agent]; d != "" && filepath.IsAbs(d) {
			dirs = append(dirs, filepath.Clean(d))
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
}

// walk lists path and what lies below it, never following a symlink.
func (w *walker) walk(path string) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return
	}
	data := w.a.isData(w.rel(path))
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		w.file(path, st.Mode&unix.S_IFMT == unix.S_IFREG, data)
		return
	}
	fd, err := safepath.Open(path, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		w.add(path, auto) // read reports what it is instead
		return
	}
	w.dirAt(fd, path, 0, data)
}

// dirAt walks the open directory fd (closed here); data: it lies in a data path.
// The entries' types come from the directory itself (getdents), so a data path
// costs no stat per file.
func (w *walker) dirAt(fd int, path string, depth int, data bool) {
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	for _, e := range ents {
		if *w.budget--; *w.budget < 0 || depth > 64 {
			w.over = true
			return
		}
		p := filepath.Join(path, e.Name())
		if w.o.skipped(p) {
			continue
		}
		sub := data || w.a.isData(w.rel(p))
		if e.IsDir() {
			dfd, err := unix.Openat(fd, e.Name(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err == nil {
				w.dirAt(dfd, p, depth+1, sub)
			}
			continue
		}
		w.file(p, e.Type().IsRegular(), sub)
	}
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
	case w.a.isWhole(w.rel(p)):
		w.add(p, wholeFile)
	default:
		w.add(p, auto)
	}
}

// overFinding says that a kept directory was too large to be audited whole.
func (o Options) overFinding() Finding {
	var roots []string
	for _, s := range o.scopes() {
		roots = append(roots, s.root)
	}
	return Finding{Path: strings.Join(roots, ", "), What: fmt.Sprintf("more than %d entries: not audited beyond them", maxWalk)}
}
