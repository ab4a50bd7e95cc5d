package policy

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/agentcfg"
	"github.com/agentbox/agentbox/internal/hostpath"
)

// Kept is one path below HOME bound writable through the HOME overlay (--keep,
// --keep-agent): the sandbox's writes to it reach the host.
type Kept struct {
	Path string // canonical, below Home, no symlink in any component below Home
	Dir  bool
	// Create: it is missing and a preset needs it; the launcher creates it (an
	// empty directory, or a file with Init) before the launch.
	Create bool
	Init   string
	From   string // "--keep" or "--keep-agent NAME"
}

// resolveKeep validates --keep and --keep-agent. Each kept path must lie strictly
// below HOME, contain neither the repository nor agentbox's own state and cache,
// and have no symlink in it: a bind follows a link to wherever it points.
func resolveKeep(p *Policy, opts Options, cwd string) error {
	for _, name := range opts.KeepAgent {
		preset, ok := agentcfg.Lookup(name)
		if !ok {
			return &Error{What: "--keep-agent", Path: name, Reason: "unknown agent (want " + strings.Join(agentcfg.Names(), " or ") + ")"}
		}
		from := "--keep-agent " + name
		for _, kp := range preset.Keep {
			k, err := checkKeep(p, opts.Home, filepath.Join(p.Home, kp.Rel), from, true)
			if err != nil {
				return err
			}
			if k.Create {
				k.Dir, k.Init = kp.Dir, kp.Init
			} else if k.Dir != kp.Dir {
				want := "a regular file"
				if kp.Dir {
					want = "a directory"
				}
				return &Error{What: from, Path: k.Path, Reason: "is not " + want}
			}
			p.Keep = appendKept(p.Keep, k)
		}
		for _, rel := range preset.ReadOnly {
			p.KeepReadOnly = append(p.KeepReadOnly, filepath.Join(p.Home, rel))
		}
		for _, rel := range preset.Private {
			p.KeepPrivate = append(p.KeepPrivate, filepath.Join(p.Home, rel))
		}
		p.KeepAgents = append(p.KeepAgents, name)
	}
	for _, arg := range opts.Keep {
		path := arg
		if strings.HasPrefix(path, "~/") && p.Home != "" {
			path = filepath.Join(p.Home, path[2:])
		} else if !filepath.IsAbs(path) {
			path = filepath.Join(cwd, path)
		}
		k, err := checkKeep(p, opts.Home, path, "--keep", false)
		if err != nil {
			if pe := (*Error)(nil); errors.As(err, &pe) && pe.Path == path {
				pe.Path = arg
				if !filepath.IsAbs(arg) && !strings.HasPrefix(arg, "~") {
					// --keep .claude meant HOME's, not the working directory's.
					pe.Reason += " (a relative path is taken from the working directory: did you mean ~/" + filepath.Clean(arg) + "?)"
				}
			}
			return err
		}
		p.Keep = appendKept(p.Keep, k)
	}
	if err := checkKeptGit(p, opts); err != nil {
		return err
	}
	return p.agentSurface()
}

// agentSurface gives every kept path the read-only and private directories of the
// known agents that lie in it, however it was kept: a plain --keep ~/.claude must
// not leave Claude Code's plugins, skills and hooks writable where --keep-agent
// claude makes them read-only. A kept path inside one of those directories would
// be read-only anyway: refused, with the reason.
func (p *Policy) agentSurface() error {
	// The agents' directories are resolved once each: most of their read-only and
	// private paths share one (~/.claude's eight), and each resolution is a lstat
	// per component of HOME's path.
	dirs := agentDirs{}
	for _, name := range agentcfg.Names() {
		preset, _ := agentcfg.Lookup(name)
		for _, list := range []struct {
			rels []string
			dst  *[]string
		}{{preset.ReadOnly, &p.KeepReadOnly}, {preset.Private, &p.KeepPrivate}} {
			for _, rel := range list.rels {
				for _, d := range dirs.paths(filepath.Join(p.Home, rel)) {
					for _, k := range p.Keep {
						if hostpath.Within(k.Path, d) {
							return &Error{What: k.From, Path: k.Path, Reason: "lies in " + quote(d) + ", which " + name + " runs or sources later as you: agentbox keeps it read-only or private inside (keep " + quote(filepath.Dir(d)) + " instead)"}
						}
					}
					if p.inKept(d) && !slices.Contains(*list.dst, d) {
						*list.dst = append(*list.dst, d)
						p.keepWayTo(d)
					}
				}
			}
		}
	}
	return nil
}

// keepWayTo keeps, as their own kept paths, the directories between the kept path
// holding d (a directory bound read-only or private inside) and d: each is then a
// mount point inside, which rename(2) refuses to move (EBUSY). Otherwise the
// session renamed the agent's directory away with its read-only binds and made a
// fresh one at its name (--keep ~/dots with ~/.claude -> dots/claude: mv
// ~/dots/claude ~/dots/x; mkdir -p ~/dots/claude/plugins/evil), whose plugins and
// hooks the next agent ran, and which the audit skipped as bound read-only.
func (p *Policy) keepWayTo(d string) {
	var k *Kept
	for i := range p.Keep {
		if hostpath.Within(d, p.Keep[i].Path) && (k == nil || len(p.Keep[i].Path) > len(k.Path)) {
			k = &p.Keep[i]
		}
	}
	if k == nil {
		return
	}
	root, from := k.Path, k.From
	var way []string
	for a := filepath.Dir(d); a != root && hostpath.Within(a, root); a = filepath.Dir(a) {
		way = append(way, a)
	}
	for i := len(way) - 1; i >= 0; i-- { // outer first: a bind over its parent's
		p.Keep = appendKept(p.Keep, Kept{Path: way[i], Dir: true, From: from})
	}
}

// agentDirs remembers, for one agentSurface, what each agent directory resolved
// to ("" when it did not).
type agentDirs map[string]string

// evalAgentDir resolves an agent's directory; a variable for the tests, which count
// the resolutions.
var evalAgentDir = filepath.EvalSymlinks

// paths are d and, when d's directory is reached through a symlink, the path it
// leads to: an agent's directory linked elsewhere (~/.claude -> dotfiles/claude,
// kept by its target since a kept path may not be a link) has its plugins and hooks
// there. d's directory is resolved at most once for all of them.
func (m agentDirs) paths(d string) []string {
	dir := filepath.Dir(d)
	r, ok := m[dir]
	if !ok {
		if c, err := evalAgentDir(dir); err == nil {
			r = c
		}
		m[dir] = r
	}
	if r != "" {
		if t := filepath.Join(r, filepath.Base(d)); t != d {
			return []string{d, t}
		}
	}
	return []string{d}
}

func appendKept(list []Kept, k Kept) []Kept {
	for _, o := range list {
		if o.Path == k.Path {
			return list
		}
	}
	return append(list, k)
}

// checkKeep applies the rules to one path; missing is allowed for presets only.
func checkKeep(p *Policy, rawHome, path, from string, mayCreate bool) (Kept, error) {
	refuse := func(why string) (Kept, error) { return Kept{}, &Error{What: from, Path: path, Reason: why} }
	if strings.ContainsRune(path, 0) {
		return refuse("contains a NUL byte")
	}
	if p.Home == "" {
		return refuse("there is no HOME overlay to keep it through ($HOME is unset, / or missing)")
	}
	path = filepath.Clean(path)
	// HOME may be given through a link (policy resolved it); accept the path as
	// written below either form, and name it below the canonical one.
	if raw := filepath.Clean(rawHome); filepath.IsAbs(raw) && raw != p.Home && hostpath.Within(path, raw) {
		path = filepath.Join(p.Home, strings.TrimPrefix(path, raw))
	}
	switch {
	case path == p.Home:
		return refuse("is HOME itself; keeping it would make all of HOME writable (keep the paths below it you need)")
	case !hostpath.Within(path, p.Home):
		return refuse("lies outside HOME " + quote(p.Home) + "; only paths below HOME can be kept")
	case hostpath.Within(p.Repo, path):
		return refuse("contains the repository; the repository is bound on its own (P2, P7)")
	case hostpath.Within(path, p.Repo):
		return refuse("lies inside the repository, which is writable already")
	}
	for _, dir := range []string{p.StateDir, p.CacheDir} {
		if dir == "" {
			continue
		}
		for _, own := range canonicalForms(dir) {
			if hostpath.Within(own, path) || hostpath.Within(path, own) {
				return refuse("holds agentbox's own state or cache (" + quote(dir) + "), which the sandbox must not write")
			}
		}
	}
	if err := p.checkConfigNotWritable(from, path, path); err != nil {
		return Kept{}, err
	}
	for _, g := range []string{".gitconfig", ".config/git"} {
		if gp := filepath.Join(p.Home, g); hostpath.Within(gp, path) || hostpath.Within(path, gp) {
			return refuse("holds Git's global config (" + quote(gp) + "), which the operator's Git runs programs from; agentbox does not keep it")
		}
	}
	// The Git directory rule (grant.go) is checked with every other grant's.
	// Every component below HOME, the last one included, must be a real
	// directory or file: no symlink anywhere.
	rel := strings.TrimPrefix(path, p.Home+"/")
	cur := p.Home
	parts := strings.Split(rel, "/")
	for i, c := range parts {
		cur = filepath.Join(cur, c)
		fi, err := os.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			if mayCreate && i == len(parts)-1 {
				return Kept{Path: path, Create: true, From: from}, nil
			}
			return refuse("does not exist (create it first)")
		}
		if err != nil {
			return refuse(reason(err))
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if cur == path {
				return refuse("is a symlink; a bind would follow it (keep its target if it is below HOME)")
			}
			return refuse("has a symlink in its path (" + quote(cur) + "); a bind would follow it")
		}
		if i < len(parts)-1 && !fi.IsDir() {
			return refuse(quote(cur) + " is not a directory")
		}
		if i == len(parts)-1 && !fi.IsDir() && !fi.Mode().IsRegular() {
			return refuse("is neither a directory nor a regular file")
		}
		if i == len(parts)-1 {
			return Kept{Path: path, Dir: fi.IsDir(), From: from}, nil
		}
	}
	return refuse("is empty")
}
