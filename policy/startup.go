package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/agentbox/agentbox/agentcfg"
	"github.com/agentbox/agentbox/internal/hostpath"
)

// StartupFile is a start-up file or directory of the operator's shell, desktop or
// agent (agentcfg.StartupPaths) that resolves into a writable grant — a dotfiles
// checkout as the repository, with ~/.bashrc -> REPO/bashrc, $ZDOTDIR or
// ~/.config/fish there, or an --add-dir holding ~/.claude. The session would write
// what the operator's next shell or agent runs, and no audit looks into the
// repository: it is bound read-only inside, and every directory between the grant
// and it is kept a mount point (Pins), so that neither it nor a parent can be
// renamed away (EBUSY) and replaced.
type StartupFile struct {
	Path  string // canonical, strictly inside Grant
	Dir   bool
	Grant string // the repository or added directory that holds it
	Named string // how the operator's programs name it: "~/.bashrc", "$ZDOTDIR/.zshrc"
	// Pins are the directories strictly between Grant and Path, outer first.
	Pins []string
}

// maxStartupHops bounds resolveLinks, as the kernel bounds a path's symlinks.
const maxStartupHops = 40

// resolveStartup finds the start-up files that lie in the repository (unless
// --read-only) or an --add-dir. It fails closed where a read-only bind cannot
// protect what the operator's program would run: a symlink on the way that lies in
// a grant (the session could point it elsewhere), a start-up directory that is the
// grant itself, and a missing file the session could create at the grant's top.
func resolveStartup(p *Policy, opts Options) error {
	env := operatorEnv(opts) // the Go API passes no Environ: its caller's is the launcher's
	homes := startupHomes(p.Home, operatorHome(env("HOME")))
	if len(homes) == 0 {
		return nil
	}
	var grants, kept []string
	for _, g := range p.Grants() {
		if g.What == "repo" || g.What == "--add-dir" {
			grants = append(grants, g.Path)
		}
	}
	for _, k := range p.Keep {
		if k.From == "--keep" {
			kept = append(kept, k.Path)
		}
	}
	if len(grants) == 0 && len(kept) == 0 {
		return nil
	}
	var found []StartupFile
	scans := make([]*startupScan, 0, len(homes))
	for _, home := range homes {
		sc := &startupScan{p: p, home: home, grants: grants, kept: kept, walk: map[string]string{}}
		var homeLinks []string
		sc.seen, homeLinks = homeListing(home)
		for _, sp := range agentcfg.StartupPaths(home, env) {
			if err := sc.consider(sp, false, false); err != nil {
				return err
			}
		}
		for _, l := range linkedStartupPaths(home, env("XDG_CONFIG_HOME"), homeLinks, sc.seen) {
			if sc.grantOf(l.at) != "" || firstWithin(l.at, sc.kept) != "" {
				continue // a link of the grant's own: the session's to change, as any file there
			}
			if err := sc.consider(l.StartupPath, true, l.wholeGrantRuns); err != nil {
				return err
			}
		}
		found = append(found, sc.found...)
		scans = append(scans, sc)
	}
	p.Startup = dedupStartup(found)
	// What the directories kept read-only lead to, once all of them are known: a
	// link from one into another is no way out.
	walkLeft := maxStartupWalk
	for _, sc := range scans {
		for _, dir := range slices.Sorted(maps.Keys(sc.walk)) {
			if why := dirEscape(dir, sc.home, sc.grants, p.Startup, sc.seen, &walkLeft); why != "" {
				return &Error{What: "start-up file", Path: sc.walk[dir], Reason: "leads to the directory " + quote(dir) + " in the writable " + quote(sc.grantOf(dir)) + ", " + why}
			}
		}
	}
	return nil
}

// startupHomes are the HOMEs whose start-up files a session must not write: the
// one it overlays, and the operator's (operatorHome), whose shells and agents run
// them after the session. The two differ only for a Go API program whose
// Options.Home gives the command a HOME of its own (or none): the files its own
// later shells run are still those of its $HOME.
func startupHomes(overlaid, operator string) []string {
	homes := make([]string, 0, 2)
	if overlaid != "" {
		homes = append(homes, overlaid)
	}
	if operator != "" && operator != overlaid {
		homes = append(homes, operator)
	}
	return homes
}

// startupScan is one launch's resolution of the start-up paths.
type startupScan struct {
	p            *Policy
	home         string   // the HOME whose start-up paths it resolves (startupHomes)
	grants, kept []string // the repository and --add-dir; the plain kept paths
	seen         map[string]pathState
	found        []StartupFile
	grantDevs    []uint64          // the grants' file systems, looked up at the first hard link
	walk         map[string]string // the existing start-up directories, by how they are named
}

// firstWithin is the first of in that holds path, or "".
func firstWithin(path string, in []string) string {
	for _, g := range in {
		if hostpath.Within(path, g) {
			return g
		}
	}
	return ""
}

func (sc *startupScan) grantOf(path string) string { return firstWithin(path, sc.grants) }

// consider resolves one start-up path; linked is one of linkedStartupPaths',
// which no list names: a link to a whole grant is a way to reach it there
// (~/.dotfiles -> REPO), not a file a program runs by that name, unless the
// link lies where programs load whole directories (~/.config, ~/.local/bin).
func (sc *startupScan) consider(sp agentcfg.StartupPath, linked, wholeGrantRuns bool) error {
	p := sc.p
	final, links, missing, ok := resolveLinks(sp.Path, sc.home, sc.seen)
	if !ok {
		return nil // a loop or an unreadable directory: the operator's program cannot open it either
	}
	refuse := func(why string) error {
		return &Error{What: "start-up file", Path: sp.Named, Reason: why}
	}
	if len(links) > 0 && !sp.Agent && !hiddenAt(p, final) {
		sc.keptStartup(sp, final, links, missing)
	}
	for _, l := range links {
		if g := sc.grantOf(l); g != "" {
			return refuse("leads through the symlink " + quote(l) + " in the writable " + quote(g) +
				", which the session could point elsewhere, and your next shell or agent would run what it wrote; link " + sp.Named + " to the file itself")
		}
	}
	g := sc.grantOf(final)
	if missing == "" && !sp.Dir {
		if why := sharedInode(final, g, sc.grants, &sc.grantDevs); why != "" {
			return refuse(why)
		}
	}
	if g == "" || hiddenAt(p, final) {
		return nil
	}
	f := StartupFile{Path: final, Dir: sp.Dir, Grant: g, Named: sp.Named}
	switch {
	case final == g && linked && !wholeGrantRuns:
		return nil
	case final == g:
		return refuse("is the writable " + quote(g) + " itself: the session would write what your next shell or agent runs, and it cannot be made read-only without the whole of it; point it elsewhere or choose another repository")
	case missing != "":
		// Nothing to bind over: the nearest existing directory is made read-only
		// instead, unless that is the grant's top.
		f.Path, f.Dir = filepath.Dir(missing), true
		if f.Path == g {
			other := "launch in another directory"
			if len(links) > 0 {
				other = "remove the link"
			}
			return refuse("leads to " + quote(final) + ", which does not exist in the writable " + quote(g) +
				": the session could create what your next shell or agent runs; create it first (it is then read-only inside) or " + other)
		}
	default:
		fi, err := os.Lstat(final)
		if err != nil {
			return nil // nothing the operator's programs can look at either
		}
		if !fi.IsDir() && !fi.Mode().IsRegular() {
			// Nothing a shell runs now, but its name is the session's: it
			// could replace a named pipe or a socket with a file.
			return refuse("leads to " + quote(final) + " in the writable " + quote(g) + ", which is " + fileKind(fi.Mode()) +
				": the session could replace it with what your next shell or agent runs; remove it or make it a file")
		}
		f.Dir = fi.IsDir()
		if f.Dir {
			sc.walk[final] = sp.Named
		}
	}
	for a := filepath.Dir(f.Path); a != g && hostpath.Within(a, g); a = filepath.Dir(a) {
		f.Pins = append([]string{a}, f.Pins...)
	}
	sc.found = append(sc.found, f)
	return nil
}

// maxStartupWalk bounds the entries read in the start-up directories that lie in
// grants, at every launch; beyond it the launch is refused.
const maxStartupWalk = 200000

// dirEscape says why the start-up directory dir, bound read-only, would not keep
// what the operator's programs read through it from the session: a symlink in it
// that leads into a writable grant outside every read-only start-up path, or
// through a symlink there (fish's conf.d/x.fish -> ../../shared/x.fish), and a file
// in it with a second name (sharedInode). "" when there is none.
func dirEscape(dir, home string, grants []string, readOnly []StartupFile, seen map[string]pathState, left *int) string {
	var devs []uint64
	writable := func(path string) bool {
		if slices.ContainsFunc(readOnly, func(f StartupFile) bool { return path == f.Path || f.Dir && hostpath.Within(path, f.Path) }) {
			return false
		}
		return slices.ContainsFunc(grants, func(g string) bool { return hostpath.Within(path, g) })
	}
	why := ""
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable: for the operator's programs too
		}
		if *left--; *left < 0 {
			why = fmt.Sprintf("which holds more than %d entries to look through for links out of it: move what is not start-up out of it", maxStartupWalk)
			return fs.SkipAll
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			final, links, _, ok := resolveLinks(path, home, seen)
			if !ok {
				return nil
			}
			for _, l := range append(links, final) {
				if writable(l) {
					why = "which holds " + quote(path) + ", a symlink that leads to " + quote(final) + " through " + quote(l) +
						", which the session could write or point elsewhere, and your next shell or agent would run what it wrote; link to a file inside the directory or copy it there"
					return fs.SkipAll
				}
			}
		case d.Type().IsRegular():
			if w := sharedInode(path, dir, grants, &devs); w != "" {
				why = "which holds " + quote(path) + ", a file with more than one name (hard links): the session could write it through another; give it a name of its own (cp it beside, then mv the copy over it)"
				return fs.SkipAll
			}
		}
		return nil
	})
	return why
}

// sharedInode says why the start-up file final (in grant g, or in none when g is
// "") cannot be protected, when it is a file with more than one name: a read-only
// bind covers one name of an inode, and the session writes it through another that
// lies in a writable grant — ~/.bashrc hard-linked to REPO/bashrc (the real
// ~/.bashrc changes, P3), or REPO/bashrc, bound read-only, hard-linked to REPO/x.
// Its other names cannot be found without a walk of the grants, so a file inside a
// grant with more than one name is refused, and one outside every grant when it
// lies on a grant's file system (hard links do not cross file systems). devs holds
// the grants' devices once looked up.
func sharedInode(final, g string, grants []string, devs *[]uint64) string {
	var st syscall.Stat_t
	if err := syscall.Lstat(final, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Nlink < 2 {
		return ""
	}
	if uid := os.Getuid(); uid != 0 && int(st.Uid) != uid && st.Mode&0o022 == 0 {
		return "" // no name of it is the user's to write (/usr/bin/perl, linked from ~/.local/bin)
	}
	fix := "; give it a name of its own (cp it beside, then mv the copy over it) or make it a symlink"
	if g != "" {
		return fmt.Sprintf("leads to %s in the writable %s, which has %d names (hard links): the session could write it through another name, and your next shell or agent would run what it wrote%s",
			quote(final), quote(g), st.Nlink, fix)
	}
	if *devs == nil {
		*devs = []uint64{}
		for _, gr := range grants {
			var gs syscall.Stat_t
			dev := ^uint64(0) // no file system: a grant that cannot be looked at holds no name
			if syscall.Stat(gr, &gs) == nil {
				dev = uint64(gs.Dev)
			}
			*devs = append(*devs, dev)
		}
	}
	for i, d := range *devs {
		if d == uint64(st.Dev) {
			return fmt.Sprintf("leads to %s, which has %d names (hard links) on the file system of the writable %s: the session could write it through a name there, and your next shell or agent would run what it wrote%s",
				quote(final), st.Nlink, quote(grants[i]), fix)
		}
	}
	return ""
}

// keptStartup adds to sc.found a start-up file that a link outside every grant
// leads to, in a plain kept path (--keep ~/src/dotfiles with ~/.zshrc ->
// src/dotfiles/zshrc), bound read-only as one in the repository is: the kept-path
// audit puts it back after the session, but a shell the operator opens while the
// session runs would run what it wrote. Where a bind cannot protect it — a link on
// the way inside the kept path (GNU stow's ~/.config/fish -> ../dots/fish with
// --keep ~/.config: the session may point it elsewhere), the kept path itself, a
// target still missing — it stays with that audit, which watches where the links
// lead at each scan, as before: a kept path is the user's to write, and refusing
// would refuse every kept ~/.config of a stow user. An agent's directory is left
// writable too (its agent writes its state there; the kept-path audit reads it).
func (sc *startupScan) keptStartup(sp agentcfg.StartupPath, final string, links []string, missing string) {
	kept := sc.kept
	var g string
	for _, k := range kept {
		if hostpath.Within(final, k) && len(k) > len(g) {
			g = k // the innermost: a kept path holds its ways' (keepWayTo)
		}
	}
	if g == "" || final == g || missing != "" || sc.grantOf(final) != "" {
		return
	}
	for _, l := range links {
		for _, k := range kept {
			if hostpath.Within(l, k) {
				return // any kept path's link is the session's to re-point
			}
		}
	}
	fi, err := os.Lstat(final)
	if err != nil || !fi.IsDir() && !fi.Mode().IsRegular() {
		return
	}
	f := StartupFile{Path: final, Dir: fi.IsDir(), Grant: g, Named: sp.Named}
	for a := filepath.Dir(final); a != g && hostpath.Within(a, g); a = filepath.Dir(a) {
		f.Pins = append([]string{a}, f.Pins...)
	}
	sc.found = append(sc.found, f)
}

// hiddenAt says whether path lies in a path --hide or --hide-secrets makes empty
// and read-only already.
func hiddenAt(p *Policy, path string) bool {
	for _, h := range p.Hide {
		if hostpath.Within(path, h.Path) {
			return true
		}
	}
	return false
}

// dedupStartup keeps one entry per path, and none inside a directory already
// read-only.
func dedupStartup(list []StartupFile) []StartupFile {
	sort.SliceStable(list, func(i, j int) bool { return list[i].Path < list[j].Path })
	var out []StartupFile
	for _, f := range list {
		// Not only the previous entry: "/r/fish-x" sorts between "/r/fish" and
		// "/r/fish/config.fish".
		if !slices.ContainsFunc(out, func(o StartupFile) bool {
			return o.Path == f.Path || o.Dir && hostpath.Within(f.Path, o.Path)
		}) {
			out = append(out, f)
		}
	}
	return out
}

// pathState is what resolveLinks found at a path: a symlink (to target), missing,
// unreadable, or neither.
type pathState struct {
	target             string
	link, missing, bad bool
	unread             bool // a symlink of HOME's listing whose target is not read yet
}

// homeListing is resolveLinks' seen, filled from one listing of HOME: most of the
// start-up paths are HOME's own names and missing, which the listing tells without
// an lstat each. An entry that is a symlink is left to resolveLinks (it reads the
// link); a name that is not listed is recorded missing when first asked
// (resolveLinks looks at HOME's names through this map and listed). links are the
// names of HOME's entries that are symlinks (linkedStartupPaths).
func homeListing(home string) (seen map[string]pathState, links []string) {
	seen = map[string]pathState{}
	ents, err := os.ReadDir(home)
	if err != nil {
		return seen, nil
	}
	seen[home+"/"] = pathState{} // the mark: HOME was listed
	for _, e := range ents {
		if e.Type()&fs.ModeSymlink == 0 {
			seen[filepath.Join(home, e.Name())] = pathState{}
		} else {
			seen[filepath.Join(home, e.Name())] = pathState{unread: true}
			links = append(links, e.Name())
		}
	}
	return seen, links
}

// linkedStartup is a symlink linkedStartupPaths found.
type linkedStartup struct {
	agentcfg.StartupPath
	// at is the link's own path with its directory's symlinks resolved (~/.config
	// may itself lead into a grant).
	at string
	// wholeGrantRuns: the link lies where programs load what it names whole
	// (~/.config/APP, ~/.local/bin/TOOL), so one to a whole grant is refused.
	wholeGrantRuns bool
}

// linkedStartupPaths are the symlinks where the operator's programs find their
// start-up files and tools by name, whether or not agentcfg's lists name them: a
// dotfiles checkout links ~/.config/nvim, ~/.config/starship.toml or
// ~/.local/bin/tool into the repository as readily as ~/.bashrc. They are HOME's
// dot entries and bin (from HOME's listing, homeLinks), the entries of ~/.config,
// of $XDG_CONFIG_HOME (xdgConfig: where programs look instead when it is set) and
// of ~/.local/bin, and ~/.local/bin itself: three listings more at most, whatever
// the repository or ~/.config holds. ~/.config itself as a link is loaded whole,
// so one to a whole grant is refused. A link deeper down (~/.config/APP/init.lua,
// as GNU stow makes when ~/.config/APP exists) is found only when the lists name
// it: listing every directory of ~/.config costs some 20 µs each a launch
// (docs/security.md). A plain file of the repository that a program finds another
// way (a PATH entry, an include) is no such path either.
func linkedStartupPaths(home, xdgConfig string, homeLinks []string, seen map[string]pathState) []linkedStartup {
	var out []linkedStartup
	for _, name := range homeLinks {
		if strings.HasPrefix(name, ".") || name == "bin" {
			p := filepath.Join(home, name)
			out = append(out, linkedStartup{StartupPath: agentcfg.StartupPath{Path: p, Named: quote("~/" + name)}, at: p, wholeGrantRuns: name == "bin" || name == ".config"})
		}
	}
	listed := map[string]bool{}
	links := func(dir, named string) {
		real, _, missing, ok := resolveLinks(dir, home, seen)
		if !ok || missing != "" || listed[real] {
			return
		}
		listed[real] = true
		ents, err := os.ReadDir(dir)
		if err != nil {
			return
		}
		for _, e := range ents {
			if e.Type()&fs.ModeSymlink != 0 {
				out = append(out, linkedStartup{StartupPath: agentcfg.StartupPath{Path: filepath.Join(dir, e.Name()), Named: quote(named + "/" + e.Name())},
					at: filepath.Join(real, e.Name()), wholeGrantRuns: true})
			}
		}
	}
	links(filepath.Join(home, ".config"), "~/.config")
	if filepath.IsAbs(xdgConfig) {
		links(filepath.Clean(xdgConfig), "$XDG_CONFIG_HOME")
	}
	links(filepath.Join(home, ".local/bin"), "~/.local/bin")
	bin := filepath.Join(home, ".local/bin") // itself a link into a grant: all of it runs
	return append(out, linkedStartup{StartupPath: agentcfg.StartupPath{Path: bin, Dir: true, Named: "~/.local/bin"}, at: bin, wholeGrantRuns: true})
}

// resolveLinks follows the symlinks of path as the kernel does, one component at
// a time: the path it leads to, the symlinks it went through, and the first
// component that does not exist ("" when all do; the rest of the path is taken
// as it is). ok is false for a loop or a component that cannot be looked at. home
// is canonical: a path below it is looked at from there on. seen remembers each
// component looked at, for the next path (most share ~/.config and ~/.local).
func resolveLinks(path, home string, seen map[string]pathState) (final string, links []string, missing string, ok bool) {
	// Not filepath.Clean'd: the kernel takes a ".." after the symlink it follows
	// ($HOME/link/.. is the link target's parent), and so does the walk below.
	cur, rest := "/", path
	if r, ok := strings.CutPrefix(rest, home+"/"); ok && home != "/" {
		cur, rest = home, r
	}
	parts := strings.Split(strings.TrimPrefix(rest, "/"), "/")
	for hops := 0; len(parts) > 0; {
		name := parts[0]
		parts = parts[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, name)
		st, known := seen[next]
		if !known && cur == home {
			if _, listed := seen[home+"/"]; listed {
				st, known = pathState{missing: true}, true // not in HOME's listing
			}
		}
		if !known || st.unread {
			st = pathState{}
			fi, err := os.Lstat(next)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				st.missing = true
			case err != nil:
				st.bad = true
			case fi.Mode()&fs.ModeSymlink != 0:
				st.link = true
				st.target, err = os.Readlink(next)
				st.bad = err != nil
			}
			seen[next] = st
		}
		switch {
		case st.missing:
			return filepath.Join(append([]string{next}, parts...)...), links, next, true
		case st.bad:
			return "", nil, "", false
		case !st.link:
			cur = next
			continue
		}
		if hops++; hops > maxStartupHops {
			return "", nil, "", false
		}
		links = append(links, next)
		if filepath.IsAbs(st.target) {
			cur = "/"
		}
		parts = append(strings.Split(strings.TrimPrefix(st.target, "/"), "/"), parts...)
	}
	return cur, links, "", true
}

// StartupNotices are the lines shown at launch for the start-up files made
// read-only: which, why, and how to edit them.
func (p *Policy) StartupNotices() []string {
	var out []string
	for _, f := range p.Startup {
		what := quote(f.Path)
		if f.Dir {
			what = "the directory " + what
		}
		out = append(out, f.Named+" leads into the writable "+quote(f.Grant)+": "+what+" is read-only inside, since your next shell or agent runs it; edit it outside the session")
	}
	return out
}
