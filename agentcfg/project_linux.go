package agentcfg

import (
	"bytes"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/widen"
)

// The repository's own agent files — .claude/ (settings, agents, skills, hooks),
// .codex/ (config.toml, rules), .mcp.json, .lsp.json — are part of the writable
// working tree, and the agents read them on the host later, behind their own trust
// prompts. They are not put back (they may be the work itself); what a session
// adds to them that names a program is reported.

// projectTop are the project files at the repository's top level; projectDirs are
// walked whole.
var (
	projectTop  = []string{".mcp.json", ".lsp.json"}
	projectDirs = []string{".claude", ".codex"}
)

// Bounds on what the project baseline reads of a hostile tree.
const (
	maxProjectEntries = 5000
	maxProjectBytes   = 64 << 20
)

// Project is the repository's agent files as they were before the session.
type Project struct {
	repo  string
	files map[string]*fileState
	over  bool
	blind []Finding // directories the last list could not read
}

// SnapshotProject records the repository's agent files.
func SnapshotProject(repo string) *Project {
	p := &Project{repo: repo, files: map[string]*fileState{}}
	r := p.relaxer()
	defer r.Restore()
	for _, c := range p.list(r) {
		p.files[c.path] = read(c.path, c.f, repo, nil, r)
	}
	return p
}

// relaxer widens what the session made unreadable in the project's agent
// directories (as the kept paths' audit does), for the modes to be put back after.
func (p *Project) relaxer() *widen.Relaxer {
	r := &widen.Relaxer{}
	for _, rel := range projectDirs {
		r.Roots = append(r.Roots, filepath.Join(p.repo, rel))
	}
	return r
}

// list walks the project files, never following a symlink, within the bounds.
func (p *Project) list(r *widen.Relaxer) []coveredFile {
	var list []coveredFile
	budget, bytesLeft := maxProjectEntries, int64(maxProjectBytes)
	add := func(path string, f format) {
		var st unix.Stat_t
		if unix.Lstat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
			if bytesLeft -= st.Size; bytesLeft < 0 {
				p.over = true
				return
			}
		}
		list = append(list, coveredFile{path, f})
	}
	opt := Options{Kept: []string{p.repo}}
	for _, rel := range projectTop {
		path := filepath.Join(p.repo, rel)
		if _, err := unixLstat(path); err == nil {
			add(path, auto)
		}
	}
	p.blind = nil
	for _, rel := range projectDirs {
		dir := filepath.Join(p.repo, rel)
		w := walker{o: opt, dir: dir, add: add, budget: &budget, relax: r}
		w.walk(dir)
		p.over = p.over || w.over
		p.blind = append(p.blind, w.blind...)
	}
	return list
}

func unixLstat(path string) (unix.Stat_t, error) {
	var st unix.Stat_t
	return st, unix.Lstat(path, &st)
}

// Report lists what the session added to the repository's agent files that names
// a program: exec-shaped keys new, changed or removed, new or changed scripts and
// other files that are code, symlinks, and the removal of a settings file that held
// any of them, or of an exec-policy rule. Nothing is moved.
func (p *Project) Report() []Finding {
	var out []Finding
	if p == nil {
		return nil
	}
	if p.over {
		out = append(out, Finding{Path: p.repo, What: "more agent files than agentbox reads (" + filepath.Join(p.repo, ".claude") + ", .codex): not all reported", Left: true})
	}
	r := p.relaxer()
	defer r.Restore()
	list := p.list(r)
	for _, f := range p.blind {
		f.Unresolved, f.Left = false, true // the work tree's: reported, as the rest
		out = append(out, f)
	}
	listed := map[string]bool{}
	for _, c := range list {
		listed[c.path] = true
	}
	// A removed settings file or exec-policy rule took a restriction away; scripts
	// and instructions go with a worktree Claude Code removes below .claude/.
	rules := filepath.Join(p.repo, ".codex", "rules") + "/"
	var removed []string
	for path, base := range p.files {
		if _, err := unixLstat(path); err != nil && !listed[path] && removalCounts(base) &&
			(!wholeFormat(base.f) || strings.HasPrefix(path, rules)) {
			removed = append(removed, path)
		}
	}
	sort.Strings(removed)
	for _, path := range removed {
		out = append(out, Finding{Path: path, What: "removed", Left: true})
	}
	for _, c := range list {
		base := p.files[c.path]
		if base == nil {
			base = &fileState{path: c.path}
		}
		cur := read(c.path, auto, p.repo, nil, r)
		switch {
		case !cur.exists:
		case cur.odd != "":
			if cur.odd != base.odd || cur.link != base.link {
				out = append(out, Finding{Path: c.path, What: cur.odd, Left: true})
			}
		case base.exists && base.odd == "" && bytes.Equal(base.data, cur.data) && base.mode == cur.mode:
		case !cur.parsed || cur.f == opaque:
		case wholeFormat(cur.f):
			if len(changedKeys(base, cur)) > 0 {
				out = append(out, Finding{Path: c.path, What: newOr(base, "new", "changed") + " " + formatName(cur.f), Left: true})
			}
		default:
			for _, k := range changedKeys(base, cur) {
				k.Left = true
				out = append(out, k)
			}
		}
	}
	return out
}

func newOr(base *fileState, n, c string) string {
	if base.exists {
		return c
	}
	return n
}
