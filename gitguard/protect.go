// Package gitguard knows Git's exec surface inside the writable repository: which
// paths of it stay read-only in the sandbox (the single source both backends read
// through the mount plan, P7) and how Git finds its directories (.git files,
// commondir, linked worktrees), as Git itself resolves them. Its subpackages do the
// rest of agentbox's Git work: gitconfig reads the config format, audit checks what a
// session left, snapshot saves and restores the metadata, pushguard refuses pushes.
package gitguard

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/agentbox/agentbox/gitguard/gitconfig"
	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/safepath"
	"github.com/agentbox/agentbox/mounts"
)

// Protected is one path of Git's exec surface that lies inside the repository and
// must be read-only in the sandbox. The plan owns the type (mounts.Protected):
// gitguard finds the paths, build.Plan alone decides the operations for them.
type Protected = mounts.Protected

// MaxModuleDepth bounds the walk of nested submodule gitdirs (.git/modules/a/modules/b…).
const MaxModuleDepth = 8

// ProtectedPaths returns, sorted so parents come first, every path inside repo that
// Git reads hooks or configuration from: for the repository's gitdir, its common dir,
// each linked worktree's gitdir and each submodule gitdir below modules/: hooks/,
// config, and config.worktree (when it exists, or when extensions.worktreeConfig asks
// Git to read it); and every file that one of those configs, or the user's system and
// global configs (HostConfigFiles), includes when it resolves inside repo — a missing
// one gets a placeholder (its first missing component) so it cannot be created.
//
// A linked worktree's gitdir (one with a commondir file) gets its commondir and
// gitdir pointers instead of hooks/ and config: Git reads those from the common dir
// there, and a pointer that cannot change keeps it so.
//
// writable lists further host directories the sandbox can write besides repo (a
// linked worktree's common dir, see FindLinkedWorktree): paths below them are
// protected exactly like paths inside repo.
//
// A path that is a symlink is replaced by its target when that lies inside repo; a
// target outside repo is already read-only in the sandbox and is left out. A symlink
// whose target inside repo does not exist is refused: covering it would mean creating
// a file through a link the repository controls.
func ProtectedPaths(repo string, writable ...string) ([]Protected, error) {
	c := collector{repo: repo, roots: append([]string{repo}, writable...), seen: map[string]bool{}}
	gitdir, err := FindGitDir(repo)
	if err != nil {
		return nil, err
	}
	if gitdir != "" {
		// A .git file (linked worktree, absorbed submodule) names the gitdir: Git
		// never rewrites it in normal work, and a new pointer would send the
		// operator's Git to a config of the sandbox's choosing.
		if dotgit := filepath.Join(repo, ".git"); isFile(dotgit) {
			c.push(Protected{Path: dotgit, Exists: true})
		}
		c.gitdir(gitdir, 0)
		if common := ReadCommonDir(gitdir); common != "" {
			c.gitdir(common, 0)
		}
	}
	// Even without a .git, the user's global config may include a file in repo.
	// includes protects the targets inside c.repo: one pass per writable root.
	host := gitconfig.HostConfigFiles(os.Getenv)
	configs := append(c.configFiles(), host...)
	for _, root := range c.roots {
		c.repo = root
		c.hostConfigs(host)
		c.includes(configs, os.Getenv("HOME"))
	}
	c.repo = repo
	if c.err != nil {
		return nil, c.err
	}
	sort.Slice(c.out, func(i, j int) bool { return c.out[i].Path < c.out[j].Path })
	return c.out, nil
}

type collector struct {
	repo  string   // the root include targets are checked against (includes)
	roots []string // every writable root: repo and the extra ones
	seen  map[string]bool
	out   []Protected
	err   error
}

// gitdir adds the exec surface of one gitdir and recurses into its submodules and
// linked worktrees.
func (c *collector) gitdir(dir string, depth int) {
	if c.err != nil || depth > MaxModuleDepth || !c.inside(dir) || c.seen[dir] {
		return
	}
	c.seen[dir] = true
	if isFile(filepath.Join(dir, "commondir")) {
		// A linked worktree's gitdir: hooks and config come from the common dir.
		c.add(filepath.Join(dir, "commondir"), false, false)
		c.add(filepath.Join(dir, "gitdir"), false, false)
	} else {
		c.add(filepath.Join(dir, "hooks"), true, true)
		c.add(filepath.Join(dir, "config"), false, true)
	}
	c.add(filepath.Join(dir, "config.worktree"), false, worktreeConfigEnabled(dir))
	for _, sub := range []string{"modules", "worktrees"} {
		c.children(filepath.Join(dir, sub), depth)
	}
}

// children visits each gitdir below parent (modules/ may nest names with slashes, so
// any directory holding a HEAD file counts).
func (c *collector) children(parent string, depth int) {
	// A modules/ or worktrees/ that is a symlink is not followed (the audit reports
	// it): what lies behind it is not where Git keeps this repository's gitdirs.
	if fi, err := os.Lstat(parent); err != nil || !fi.IsDir() {
		return
	}
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue // a symlinked module dir is not followed
		}
		p := filepath.Join(parent, e.Name())
		if isFile(filepath.Join(p, "HEAD")) || isFile(filepath.Join(p, "config")) {
			c.gitdir(p, depth+1)
		} else {
			c.children(p, depth+1)
		}
	}
}

// add records path when it exists, or when missing is true and a placeholder may
// be created for it.
func (c *collector) add(path string, dir, whenMissing bool) {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if whenMissing {
			c.push(Protected{Path: path, Dir: dir})
		}
		return
	case err != nil:
		c.err = fmt.Errorf("inspect %s: %w", path, err)
		return
	}
	if fi.Mode()&fs.ModeSymlink == 0 {
		c.push(Protected{Path: path, Dir: fi.IsDir(), Exists: true})
		return
	}
	// A symlink cannot be covered by a mount, and the link itself lives in a
	// writable directory: the sandbox could replace it (rm .git/hooks && mkdir
	// .git/hooks) whatever is mounted on its target. Refuse rather than pretend.
	c.err = fmt.Errorf("%s is a symlink: agentbox cannot keep a link in the writable repository from being replaced; make it a real file or directory (for hooks, set core.hooksPath instead)", path)
}

// hostConfigs protects the user's global and system config files themselves where
// they resolve inside the writable root c.repo: a ~/.gitconfig that is a link into
// a dotfiles repository (stow), a ~/.config linked there, GIT_CONFIG_GLOBAL naming
// a file in it. Written inside, they would make every Git of the operator's run a
// program, at once, not only after the session's audit. A missing one gets a
// placeholder for its first missing component, as a missing include target does.
func (c *collector) hostConfigs(files []string) {
	for _, f := range files {
		canon, missing := Canonical(f)
		if canon == "" || !hostpath.Within(canon, c.repo) {
			continue
		}
		if missing == "" {
			c.add(canon, false, true)
		} else {
			c.push(Protected{Path: missing, Dir: missing != canon})
		}
	}
}

// configFiles returns the existing config files among the protected paths, whose
// includes must be protected too.
func (c *collector) configFiles() []string {
	var out []string
	for _, p := range c.out {
		if b := filepath.Base(p.Path); p.Exists && !p.Dir && (b == "config" || b == "config.worktree") {
			out = append(out, p.Path)
		}
	}
	return out
}

// inside reports whether path lies in one of the writable roots.
func (c *collector) inside(path string) bool {
	for _, r := range c.roots {
		if hostpath.Within(path, r) {
			return true
		}
	}
	return false
}

func (c *collector) push(p Protected) {
	if !c.seen["p:"+p.Path] {
		c.seen["p:"+p.Path] = true
		c.out = append(c.out, p)
	}
}

// lexicalTarget follows a chain of symlinks as far as it resolves and returns the
// first missing absolute path it points at.
func lexicalTarget(path string) (string, error) {
	for range 40 {
		link, err := os.Readlink(path)
		if err != nil {
			return path, nil
		}
		if !filepath.IsAbs(link) {
			link = filepath.Join(filepath.Dir(path), link)
		}
		dir, err := filepath.EvalSymlinks(filepath.Dir(link))
		if err != nil {
			return filepath.Clean(link), nil
		}
		path = filepath.Join(dir, filepath.Base(link))
	}
	return "", errors.New("too many levels of symbolic links")
}

// FindGitDir returns the gitdir of the work tree at repo: repo/.git when it is a
// directory, the target of a "gitdir:" file otherwise, "" when there is none.
func FindGitDir(repo string) (string, error) {
	dotgit := filepath.Join(repo, ".git")
	fi, err := os.Lstat(dotgit)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("inspect %s: %w", dotgit, err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		// Git follows a .git symlink; so does the protection, to the same place.
		canon, err := filepath.EvalSymlinks(dotgit)
		if err != nil {
			return "", nil // dangling: Git finds no repository here either
		}
		if fi, err = os.Stat(canon); err != nil {
			return "", nil
		}
		if fi.IsDir() {
			return canon, nil
		}
		dotgit = canon
	}
	switch {
	case fi.IsDir():
		return dotgit, nil
	case fi.Mode().IsRegular():
		target := readGitFile(dotgit)
		if target == "" {
			return "", nil
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(repo, target)
		}
		if canon, err := filepath.EvalSymlinks(target); err == nil {
			return canon, nil
		}
		return filepath.Clean(target), nil
	}
	return "", nil
}

// readGitFile returns the path of a "gitdir: PATH" file, or "".
func readGitFile(path string) string {
	b, err := readSmall(path)
	if err != nil {
		return ""
	}
	target, _ := ParseGitFile(b)
	return target
}

// ReadCommonDir returns the canonical common dir named by gitdir/commondir, or "".
func ReadCommonDir(gitdir string) string {
	b, err := readSmall(filepath.Join(gitdir, "commondir"))
	if err != nil {
		return ""
	}
	p, ok := ParseCommonDir(gitdir, b)
	if !ok {
		return ""
	}
	if canon, err := filepath.EvalSymlinks(p); err == nil {
		return canon
	}
	return filepath.Clean(p)
}

// worktreeConfigEnabled reports whether Git reads config.worktree for gitdir: it does
// when extensions.worktreeConfig is true in the gitdir's (or its common dir's) config.
func worktreeConfigEnabled(gitdir string) bool {
	for _, dir := range []string{gitdir, ReadCommonDir(gitdir)} {
		if dir == "" {
			continue
		}
		entries, err := gitconfig.ReadFile(filepath.Join(dir, "config"))
		if err != nil {
			continue
		}
		for _, e := range entries {
			if e.Section == "extensions" && e.Key == "worktreeconfig" && e.Bool() {
				return true
			}
		}
	}
	return false
}

// readSmall reads at most 64 KiB of a regular file: pointer files are one line, and a
// hostile one must not make the launcher read gigabytes, hang it as a FIFO, nor have
// it open a device a planted link names (safepath.OpenRegularFollow: a watchdog is
// armed by its open). Symlinks are followed, as Git does.
func readSmall(path string) ([]byte, error) {
	f, err := safepath.OpenRegularFollow(path)
	if errors.Is(err, safepath.ErrNotRegular) {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil, err
	}
	return bytes.TrimRight(b, "\x00"), nil
}

func isFile(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode().IsRegular()
}
