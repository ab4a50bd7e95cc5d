package gitguard

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/gitguard/gitconfig"
	"github.com/agentbox/agentbox/internal/hostpath"
)

// canonical resolves every symlink of path as far as path exists and appends the
// missing rest. missing is the first component that does not exist ("" when path
// exists); canon is "" when the existing part cannot be resolved.
//
// Resolution only reads link targets (lstat, readlink); nothing is opened, so a
// planted FIFO or device cannot block it.
func Canonical(path string) (canon, missing string) {
	path = filepath.Clean(path)
	existing, rest := path, ""
	for {
		if _, err := os.Lstat(existing); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", ""
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			return "", ""
		}
		rest = filepath.Join(filepath.Base(existing), rest)
		existing = parent
	}
	resolved, err := filepath.EvalSymlinks(existing)
	if errors.Is(err, fs.ErrNotExist) {
		// existing is a dangling symlink: follow it by hand to what is missing.
		t, lerr := lexicalTarget(existing)
		if lerr != nil || t == "" {
			return "", ""
		}
		return Canonical(filepath.Join(t, rest))
	}
	if err != nil {
		return "", ""
	}
	if rest == "" {
		return resolved, ""
	}
	first, _, _ := strings.Cut(rest, "/")
	return filepath.Join(resolved, rest), filepath.Join(resolved, first)
}

// includes protects, for each config file in files (and each file those include, to
// Git's depth bound), every include target that resolves inside the repository: the
// file itself when it exists, else a placeholder for its first missing component, so
// the sandbox can neither change nor create it.
func (c *collector) includes(files []string, home string) {
	seen := map[string]bool{}
	var visit func(file string, depth int)
	visit = func(file string, depth int) {
		if c.err != nil || depth >= gitconfig.MaxIncludeDepth || seen[file] {
			return
		}
		seen[file] = true
		entries, err := gitconfig.ReadHostFile(file)
		if err != nil {
			return // Git reads nothing from a file it cannot open or parse
		}
		for _, target := range gitconfig.IncludePaths(entries, file, home) {
			canon, missing := Canonical(target)
			if canon == "" {
				continue
			}
			if hostpath.Within(canon, c.repo) {
				if missing == "" {
					c.add(canon, false, true)
				} else {
					c.push(Protected{Path: missing, Dir: missing != canon})
				}
			}
			if missing == "" {
				visit(canon, depth+1)
			}
		}
	}
	for _, f := range files {
		visit(f, 0)
	}
}

// OutsideGitDirs returns the Git directories of repo that lie outside it and that a
// session may write: a verified linked worktree's common dir (FindLinkedWorktree),
// which holds the worktree's own gitdir and is bound writable. An unverified .git
// file gets nothing: its metadata stays read-only, and the audit must not wander
// wherever a planted pointer sends it (it reports such a pointer instead).
func OutsideGitDirs(repo string) []string {
	w, err := FindLinkedWorktree(repo)
	if err != nil || w == nil {
		return nil
	}
	return []string{w.CommonDir}
}
