package agentcfg

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/widen"
)

// Links out of a plain kept path. A kept directory that is no agent's is the
// user's to change: the session may write anything in it. A symlink it leaves
// there is more than that: the operator's programs later open the kept path's
// files by name on the host, and an open follows the link — a tool appending its
// log to ~/.tool/log appends to ~/.bashrc when the session made that name a link
// to it, and one unpacking into ~/.tool/src/x writes into whatever directory x
// names. So a symlink new in the session that leads out of its kept path is moved
// to the quarantine, and a link of the user's that it retargeted is put back; the
// user's own links, there at launch, stay, and so do links that stay inside and
// links to a file of someone else's that the user cannot write (a venv's
// bin/python -> /usr/bin/python3), through which nothing of the user's is reached.
// Into the kept path counts as out where the audit guards what lies there (an
// agent's directory, a shell start-up file): the host's write through the link
// would land after the audit.

// maxLinkWalk bounds the entries the search for links out reads in the plain kept
// paths; beyond it they are not searched, and the session fails (a variable for
// the tests).
var maxLinkWalk = 1000000

// plainRoots are the kept paths that neither are nor lie in an agent's directory
// (an agent's directory inside one is walked as the agent's: agents).
func (o Options) plainRoots(scopes []scope) (roots, agents []string) {
	for _, s := range scopes {
		agents = append(agents, s.root)
	}
	kept := slices.Clone(o.Kept)
	slices.Sort(kept)
	for _, k := range kept {
		if n := len(roots); n > 0 && within(k, roots[n-1]) {
			continue
		}
		if !slices.ContainsFunc(agents, func(a string) bool { return within(k, a) }) {
			roots = append(roots, k)
		}
	}
	return roots, agents
}

// outLinks adds, with add, every symlink in the plain kept paths that leads out of
// its kept path (linkLeadsOut); blind are the directories it could not list and,
// past maxLinkWalk entries, what it did not search.
func (o Options) outLinks(r *widen.Relaxer, add func(string, format), scopes []scope) (blind []Finding) {
	roots, agents := o.plainRoots(scopes)
	budget := maxLinkWalk
	for _, root := range roots {
		w := walker{o: o, dir: root, budget: &budget, relax: r, links: true, exclude: agents,
			add: func(p string, _ format) {
				if o.linkLeadsOut(p, root) {
					add(p, outLink)
				}
			}}
		w.walk(root)
		blind = append(blind, w.blind...)
		if w.over {
			blind = append(blind, Finding{Path: root, Unresolved: true,
				What: fmt.Sprintf("more than %d entries: not searched for symlinks leading out beyond them", maxLinkWalk)})
			break
		}
	}
	return blind
}

// linkRoot is the plain kept path that holds p, "" when none does.
func (o Options) linkRoot(p string) string {
	roots, _ := o.plainRoots(o.scopes(o.homeLinks()))
	for _, r := range roots {
		if within(p, r) {
			return r
		}
	}
	return ""
}

// linkLeadsOut reports whether an open of the symlink p on the host lands outside
// root (or where the audit guards, guarded), and not on a system file.
func (o Options) linkLeadsOut(p, root string) bool {
	out, _ := o.leadsOut(p, root)
	return out
}

// leadsOut is linkLeadsOut, and the symlinks the resolution went through.
func (o Options) leadsOut(p, root string) (out bool, via []string) {
	t, via, ok := resolveLink(p)
	switch {
	case !ok:
		return true, via // where it leads cannot be told: the conservative side
	case within(t, root):
		return o.guarded(t), via
	}
	return !systemFile(t), via
}

// guarded: t is a file the audit guards, or lies in an agent's directory.
func (o Options) guarded(t string) bool {
	for _, k := range known {
		if t == filepath.Join(o.Home, k.rel) {
			return true
		}
	}
	for _, a := range append(agentDirs[:len(agentDirs):len(agentDirs)], startDirs...) {
		if within(t, filepath.Join(o.Home, a.rel)) {
			return true
		}
	}
	for _, d := range o.AgentDirs {
		if d != "" && within(t, d) {
			return true
		}
	}
	return false
}

// systemFile: t is a file (no directory) of another user's that the launching user
// cannot write: reached through a link, it lets the user's programs neither write
// nor read anything of the user's.
func systemFile(t string) bool {
	var st unix.Stat_t
	if unix.Stat(t, &st) != nil || st.Mode&unix.S_IFMT == unix.S_IFDIR || int(st.Uid) == os.Geteuid() {
		return false
	}
	return unix.Faccessat(unix.AT_FDCWD, t, unix.W_OK, unix.AT_EACCESS) != nil
}

// resolveLink says where an open of the symlink p on the host lands
// (hostpath.Resolve from p's directory, which the walk reached resolved): the path
// it resolves to, or for a dangling link the path an open would create. via are
// the symlinks followed, p first. ok is false where that cannot be told.
func resolveLink(p string) (t string, via []string, ok bool) {
	r, err := hostpath.Resolve(filepath.Dir(p), filepath.Base(p))
	return r.Path, r.Links, err == nil
}

// auditLinks audits the symlinks that led out of a plain kept path at launch, or
// lead out now: one new in the session, or retargeted, that leads out is moved to
// the quarantine and the user's link, if there was one, put back. Removing it, or
// replacing it by a file, is the session's to do: the kept path is writable. A link
// that leads out only through another that is moved is audited after it, so that
// the user's link to a directory the session replaced by a link out stays.
func (b *Baseline) auditLinks(links []*fileState, r *widen.Relaxer) (out []Finding) {
	type cand struct {
		base      *fileState
		root, now string
		via       []string
	}
	var left []cand
	for _, base := range links {
		var st unix.Stat_t
		if err := unix.Lstat(base.path, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
			continue
		}
		now, err := os.Readlink(base.path)
		switch {
		case err != nil:
			out = append(out, Finding{Path: base.path, What: "symlink not audited (" + err.Error() + ")", Unresolved: true})
			continue
		case base.exists && base.odd != "" && base.link == now:
			continue // the user's own link, as it was
		}
		root := b.opt.linkRoot(base.path)
		if out, via := b.opt.leadsOut(base.path, root); root != "" && out {
			left = append(left, cand{base, root, now, via})
		}
	}
	for len(left) > 0 {
		paths := map[string]bool{}
		for _, c := range left {
			paths[c.base.path] = true
		}
		var later []cand
		for _, c := range left {
			if slices.ContainsFunc(c.via, func(v string) bool { return v != c.base.path && paths[v] }) {
				later = append(later, c)
				continue
			}
			out = append(out, b.putBackLink(c.base, c.root, c.now, r)...)
		}
		if len(later) == len(left) { // a loop among them: each leads nowhere, all go
			for _, c := range later {
				out = append(out, b.putBackLink(c.base, c.root, c.now, r)...)
			}
			break
		}
		left = later[:0:0]
		for _, c := range later { // what they went through was moved: judged again
			if o, via := b.opt.leadsOut(c.base.path, c.root); o {
				left = append(left, cand{c.base, c.root, c.now, via})
			}
		}
	}
	return out
}

// putBackLink moves the link at base.path (now pointing to link) to the quarantine
// and puts the user's link, if there was one, back.
func (b *Baseline) putBackLink(base *fileState, root, link string, r *widen.Relaxer) []Finding {
	cur := &fileState{path: base.path, f: outLink, exists: true, odd: "replaced by a symlink", link: link}
	what := "new symlink to " + printable(link)
	if base.exists {
		what = "symlink changed to " + printable(link)
	}
	what += ", which leads out of the kept path " + printable(root) + ": programs run later outside agentbox would write through it"
	moved, err := widened(r, base.path, func() (string, error) { return b.putBack(base, cur) })
	f := Finding{Path: base.path, What: what, MovedTo: moved}
	if err != nil {
		f.What += " (could not put it back: " + err.Error() + ")"
		f.Unresolved = true
	}
	return []Finding{f}
}
