package audit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/gitguard"
	"github.com/agentbox/agentbox/gitguard/gitconfig"
)

// What the scan reads in a gitdir: its config and includes, hooks, modules, worktrees and todo lists.

// worktreeConfigOn reports whether a repository config of these turns
// extensions.worktreeConfig on, so that Git reads config.worktree too.
func worktreeConfigOn(configs ...[]gitconfig.Entry) bool {
	for _, entries := range configs {
		for _, e := range entries {
			if e.Section == "extensions" && e.Key == "worktreeconfig" && e.Bool() {
				return true
			}
		}
	}
	return false
}

// dotGit handles a .git entry of the working-tree directory worktree.
func (s *scanner) dotGit(p, worktree string) {
	fi, err := s.lstat(p)
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
			s.launch.markTree(p, s.openPath)
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
	own := s.config(filepath.Join(dir, "config"), dir, 0)
	// config.worktree is audited whether or not Git reads it (a danger there is
	// one as soon as the extension is turned on), but tells what Git does only
	// where Git reads it: a session may create it where Git does not
	// (gitguard.ProtectedPaths protects it then only when it exists).
	worktreeOwn := s.config(filepath.Join(dir, "config.worktree"), dir, 0)
	base := worktree
	if base == "" {
		base = dir
	}
	s.hooksDir(filepath.Join(dir, "hooks"), base)
	var common []gitconfig.Entry
	if c := s.commonDir(dir, depth); c != "" {
		// A linked worktree runs with its common dir's config and hooks, from its own
		// working tree: a relative core.hooksPath there resolves against base.
		common = s.config(filepath.Join(c, "config"), c, 0)
		s.hooksDir(filepath.Join(c, "hooks"), base)
	}
	var host []gitconfig.Entry
	if s.spendConfigs(len(s.hostEntries)) {
		host = s.hostEntries
	}
	entries := slices.Concat(own, worktreeOwn, common, host)
	gitReads := entries
	if len(worktreeOwn) > 0 && !worktreeConfigOn(own, common) {
		gitReads = slices.Concat(own, common, host)
	}
	for _, e := range entries {
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
	top, listed, whole := s.gitdirTop(dir) // audit_outlinks_linux.go
	if whole {
		s.gitdirBlockers(dir, top)
	} else {
		s.gitdirBlockers(dir, nil)
	}
	s.gitdirOutLinks(dir, top, listed, whole)
	for _, todo := range []string{"rebase-merge/git-rebase-todo", "sequencer/todo"} {
		s.todo(filepath.Join(dir, todo))
	}
	s.stateFiles(dir)           // audit_state_linux.go
	s.indexFiles(dir, gitReads) // audit_index_linux.go
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
	fi, err := s.lstat(path)
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
	fi, err := s.lstat(dir)
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
		fi, err := s.lstat(p) // beneath the held directory, as every path of the scan
		if err != nil {
			s.skip(p, "cannot inspect: %v", err)
			continue
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			link := s.readlink(p)
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
		if fi, err := s.lstat(canon); err != nil || !fi.Mode().IsRegular() {
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
	if s.configsSpent() {
		return nil
	}
	var entries []gitconfig.Entry
	if s.inside(filepath.Clean(path)) || gitdir != "" {
		entries = s.repoConfig(path, gitdir)
	} else if canon, missing := gitguard.Canonical(path); canon != "" && missing == "" {
		if s.inside(canon) {
			entries = s.repoConfig(canon, gitdir)
		} else {
			entries = s.hostConfig(canon)
		}
	}
	if !s.spendConfigs(len(entries)) {
		return nil
	}
	all := entries
	// A file included many times is expanded once: its entries once are what the
	// audit needs, and a million include lines of one file multiplied it (8,000
	// of a 1,000-entry file took 3.7 GB).
	included := map[string]bool{}
	for _, inc := range gitconfig.IncludePaths(entries, path, s.opt.Home) {
		if c := filepath.Clean(inc); !included[c] {
			included[c] = true
			if more := s.config(inc, gitdir, depth+1); s.spendConfigs(len(more)) {
				all = append(all, more...)
			}
		}
	}
	s.expanded[key] = expansion{depth: depth, entries: all}
	return all
}

// spendConfigs counts n more config entries handled, and
// reports whether the scan's bound (MaxConfigEntries) still allows them. Each
// config is handled again for every Git directory that reads it, so a file
// included by many nested repositories costs its entries once per repository: the
// bound keeps that product finite. Past it, no further config is read, and the
// repository itself is reported as not audited (configsSpent).
func (s *scanner) spendConfigs(n int) bool {
	if s.surface.configsHandled+n <= s.opt.MaxConfigEntries {
		s.surface.configsHandled += n
		return true
	}
	s.surface.configsHandled = s.opt.MaxConfigEntries
	return !s.configsSpent()
}

// configLineBytes is what a config file's bytes count for against MaxConfigEntries:
// a file of few, long entries costs its parse as a file of many short ones.
const configLineBytes = 64

// hostConfig reads a config file outside the writable set, its bytes counted
// against the scan's bound before they are parsed: a host file a nested repository
// includes is read again for each repository that does. The count and the parse
// come from one open descriptor (gitconfig.ReadHostFileWithin).
func (s *scanner) hostConfig(path string) []gitconfig.Entry {
	entries, _ := gitconfig.ReadHostFileWithin(path, func(n int64) bool {
		return s.spendConfigs(int(n / configLineBytes))
	})
	return entries
}

// configsSpent reports whether the scan's bound on config entries is used up. The
// first time it is, the repository is reported as a place the audit could not see
// into: which configs were left out depends on the walk's order, and moving any
// one of them aside would not make the rest audited.
func (s *scanner) configsSpent() bool {
	if s.surface.configsHandled < s.opt.MaxConfigEntries {
		return false
	}
	if !s.configsOver {
		s.configsOver = true
		s.skip(s.repo, "its Git configs hold more than the scan's bound of %d entries in all (an included file counted once for each config that includes it), so the rest were not read", s.opt.MaxConfigEntries)
	}
	return true
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
		return s.hostConfig(p)
	}
	if entries, seen := s.configs[p]; seen {
		return entries
	}
	s.configs[p] = nil
	it, data, ok := s.file(p, KindConfig, gitconfig.MaxFileSize)
	if !ok || data == nil || !s.spendConfigs(len(data)/configLineBytes) {
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
			s.danger(it, describe(e, why))
		}
		if e.Section == "core" && e.Key == "worktree" && gitdir != "" && !e.NoValue {
			wt := e.Value
			if !filepath.IsAbs(wt) {
				wt = filepath.Join(gitdir, wt)
			}
			if _, inside := s.canonInside(wt); !inside {
				s.danger(it, describe(e, "points the working tree outside the repository; checkouts would write there"))
			}
		}
		if gitdir != "" && !s.ownGitDir(gitdir) {
			if why := s.localRemoteOutside(e, gitdir); why != "" {
				s.danger(it, describe(e, why))
			}
		}
	}
	return entries
}

// ownGitDir reports whether gitdir is the repository's own (its .git, the
// submodules' and worktrees' below it, or a GitDir outside it), whose config the
// sandbox cannot write (P7); the rest are nested repositories the session may
// have made or changed.
func (s *scanner) ownGitDir(gitdir string) bool {
	own := filepath.Join(s.repo, ".git")
	if c := filepath.Clean(gitdir); c == own || strings.HasPrefix(c, own+"/") {
		return true
	}
	for _, d := range s.opt.GitDirs {
		if filepath.Clean(gitdir) == filepath.Clean(d) {
			return true
		}
	}
	return false
}

// localRemoteOutside says why e, an entry of the nested repository at gitdir,
// makes the operator's Git read or write another repository of the host: a
// remote's url or pushurl, or a url.BASE.insteadOf's BASE, that is a local path
// (or file://) leading outside the repository. The operator's git fetch or pull
// there copies that repository's objects into this one, where the next session
// reads them (also from a path hidden from the session: --hide, --hide-secrets);
// git push writes into it. "" otherwise.
func (s *scanner) localRemoteOutside(e gitconfig.Entry, gitdir string) string {
	var url, what string
	switch {
	case e.Section == "remote" && (e.Key == "url" || e.Key == "pushurl") && !e.NoValue:
		url, what = strings.TrimSpace(e.Value), "names"
	case e.Section == "url" && (e.Key == "insteadof" || e.Key == "pushinsteadof"):
		url, what = e.Subsection, "rewrites URLs to"
	default:
		return ""
	}
	p, ok := localURLPath(url)
	if !ok {
		return ""
	}
	outside := func(p string) string {
		return what + " a local path outside the repository (" + oneLine(p) + "): your git fetch or pull there copies that repository's objects into this one, where the next session reads them, and git push writes into it"
	}
	var candidates []string
	switch {
	case p == "~" || strings.HasPrefix(p, "~/"):
		if s.opt.Home == "" {
			return outside(p)
		}
		candidates = []string{filepath.Join(s.opt.Home, strings.TrimPrefix(p, "~"))}
	case strings.HasPrefix(p, "~"):
		return outside(p) // another user's home
	case filepath.IsAbs(p):
		candidates = []string{p}
	case filepath.Base(gitdir) == ".git":
		// Git runs at the working tree's top (the gitdir's parent), or in the
		// gitdir: either base leading out counts.
		candidates = []string{filepath.Join(filepath.Dir(gitdir), p), filepath.Join(gitdir, p)}
	default:
		candidates = []string{filepath.Join(gitdir, p)}
	}
	for _, c := range candidates {
		if _, inside := s.canonInside(c); !inside {
			return outside(c)
		}
	}
	return ""
}

// localURLPath is the path of a Git URL that names a local repository, as Git
// tells them apart (transport.c, url_is_local_not_ssh): file://PATH, or a string
// that is no SCHEME://URL, no HELPER::ADDRESS, and no scp-like HOST:PATH (a colon
// before any slash).
func localURLPath(url string) (string, bool) {
	if url == "" {
		return "", false
	}
	if p, ok := strings.CutPrefix(url, "file://"); ok {
		return p, true
	}
	if strings.Contains(url, "::") {
		return "", false // a remote helper: audit_keys's rule
	}
	if i := strings.Index(url, "://"); i > 0 && strings.Trim(url[:i], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-") == "" {
		return "", false
	}
	colon, slash := strings.IndexByte(url, ':'), strings.IndexByte(url, '/')
	if colon >= 0 && (slash < 0 || colon < slash) {
		return "", false // HOST:PATH, over ssh
	}
	return url, true
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
			s.danger(it, describe(e, "submodule update runs a shell command"))
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
			s.danger(it, fmt.Sprintf("runs %q when the rebase continues", cmd))
		}
	}
}
