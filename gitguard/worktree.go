package gitguard

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/internal/hostpath"
)

// Linked worktrees. A linked worktree's metadata lives outside its directory: the
// worktree's own gitdir is MAIN/.git/worktrees/NAME, and everything shared (objects,
// refs, logs, packed-refs, config, hooks) is in the common dir MAIN/.git. The host
// view of the sandbox is read-only, so without more `git commit` fails there.
//
// What must be writable, and why the whole common dir is bound:
//
//   - the worktree's gitdir: HEAD, index, logs/HEAD, ORIG_HEAD, rebase state — each
//     written as X.lock beside X and renamed over it, so the directory must be
//     writable, not the files;
//   - objects/, refs/ and logs/: new objects, branch tips, reflogs (again lock files
//     beside each ref);
//   - the common dir itself: every ref deletion (git branch -d/-m, git stash drop,
//     git fetch --prune, git tag -d) takes MAIN/.git/packed-refs.lock and may rename it
//     over packed-refs; gc and pack-refs write there too. A writable bind of the file
//     packed-refs would not let Git create the lock beside it.
//
// So the common dir is bound writable (it contains the worktree's gitdir), and on top
// of it stay read-only: the main worktree's own HEAD and index (LinkedWorktree.
// ReadOnly; the sandbox cannot switch the operator's main checkout or rewrite its
// staging area), and, through ProtectedPaths with the common dir as an extra writable
// root, hooks/, config, config.worktree and every linked worktree gitdir's commondir
// and gitdir pointers. What the sandbox can still write in the common dir — other
// worktrees' HEAD and index, info/, new files such as a planted commondir — is what
// the post-session audit covers (ScanOptions.GitDirs, OutsideGitDirs).

// LinkedWorktree is a verified linked worktree: its metadata outside the repository.
type LinkedWorktree struct {
	GitDir    string // the worktree's own gitdir, CommonDir/worktrees/NAME
	CommonDir string // the main repository's gitdir, bound writable
	// ReadOnly are the main worktree's own HEAD and index (those that exist), kept
	// read-only on top of the writable common dir.
	ReadOnly []string
}

// ErrWorktreeUnverified wraps the reason a gitdir file that looks like a linked
// worktree's was not trusted; its metadata then stays read-only.
var ErrWorktreeUnverified = errors.New("linked worktree not verified")

// FindLinkedWorktree returns repo's linked-worktree metadata, or nil when repo is not
// a linked worktree (repo/.git is a directory, missing, or names a gitdir without a
// commondir, such as a submodule checkout).
//
// repo/.git is writable by every earlier session, so nothing it says is trusted on
// its own: the gitdir it names must be CommonDir/worktrees/NAME, its commondir must
// lead back to exactly that CommonDir, CommonDir must look like a gitdir, and the
// gitdir's own back pointer (NAME/gitdir, which Git writes and only the main
// repository holds) must name repo/.git. None of the paths may pass through a
// symlink: they are checked as written, and bound as written. Anything else is an
// error wrapping ErrWorktreeUnverified.
func FindLinkedWorktree(repo string) (*LinkedWorktree, error) {
	dotgit := filepath.Join(repo, ".git")
	fi, err := os.Lstat(dotgit)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", dotgit, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, nil
	}
	target := readGitFile(dotgit)
	if target == "" {
		return nil, nil
	}
	gitdir := absFrom(repo, target)
	if !isFile(filepath.Join(gitdir, "commondir")) {
		return nil, nil // not a linked worktree's gitdir
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s: %w: %s", dotgit, ErrWorktreeUnverified, fmt.Sprintf(format, args...))
	}
	if err := noSymlinks(gitdir); err != nil {
		return nil, bad("gitdir %s: %v", gitdir, err)
	}
	b, err := readSmall(filepath.Join(gitdir, "commondir"))
	if err != nil {
		return nil, bad("read %s/commondir: %v", gitdir, err)
	}
	common := absFrom(gitdir, strings.TrimSpace(string(b)))
	if err := noSymlinks(common); err != nil {
		return nil, bad("common dir %s: %v", common, err)
	}
	if filepath.Dir(gitdir) != filepath.Join(common, "worktrees") {
		return nil, bad("gitdir %s is not below %s/worktrees", gitdir, common)
	}
	if !isFile(filepath.Join(common, "HEAD")) || !isDir(filepath.Join(common, "objects")) || !isDir(filepath.Join(common, "refs")) {
		return nil, bad("%s is not a Git directory (HEAD, objects/, refs/)", common)
	}
	b, err = readSmall(filepath.Join(gitdir, "gitdir"))
	if err != nil {
		return nil, bad("read %s/gitdir: %v", gitdir, err)
	}
	back := absFrom(gitdir, strings.TrimSpace(string(b)))
	if canon, err := filepath.EvalSymlinks(filepath.Dir(back)); err == nil {
		back = filepath.Join(canon, filepath.Base(back))
	}
	if back != dotgit {
		return nil, bad("%s/gitdir points at %s, not here (moved? run git worktree repair)", gitdir, back)
	}
	if hostpath.Within(common, repo) || hostpath.Within(repo, common) {
		return nil, bad("the common dir %s and the worktree %s overlap", common, repo)
	}
	w := &LinkedWorktree{GitDir: gitdir, CommonDir: common}
	for _, name := range []string{"HEAD", "index"} {
		if p := filepath.Join(common, name); isFile(p) {
			w.ReadOnly = append(w.ReadOnly, p)
		}
	}
	return w, nil
}

// absFrom makes a pointer file's path absolute (Git resolves relative ones against
// the directory holding the pointer) and clean.
func absFrom(dir, p string) string {
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	return filepath.Clean(p)
}

// noSymlinks checks that path is an existing directory reached without a symlink in
// any component.
func noSymlinks(path string) error {
	canon, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	if canon != path {
		return fmt.Errorf("reached through a symlink (it is %s)", canon)
	}
	if !isDir(path) {
		return errors.New("not a directory")
	}
	return nil
}

func isDir(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.IsDir()
}
