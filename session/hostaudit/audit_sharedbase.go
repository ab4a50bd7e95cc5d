package hostaudit

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/agentbox/agentbox/gitguard/audit"
	"github.com/agentbox/agentbox/internal/hostpath"
)

// Sessions of different repositories whose writable trees overlap: two linked
// worktrees of one repository (each writes the common Git directory, where the
// main worktree's submodule gitdirs, packed-refs and worktree admin dirs live), a
// worktree and the main one, or --repo R beside --repo R/src. Neither inherits the
// other's baseline, as their trees differ; but the part they share is no more the
// user's than a tree another session of the same repository wrote. So a fresh
// baseline takes each shared part from the oldest pending overlapping session's
// baseline, which was taken before that session's command ran; a plant there is
// then new to both audits.

// overlappingJournals returns the readable pending journals of other repositories
// whose writable roots (the repository and its outside Git dirs) overlap roots, by
// journal name, read whole (only these: pendingJournals).
func overlappingJournals(r pendingReading, stateDir, repo string, roots []string) map[string]*auditJournal {
	found := map[string]*auditJournal{}
	own := journalPrefix(repo)
	r.each(func(name string, j *auditJournal) {
		if j == nil || (strings.HasPrefix(name, own) && j.Repo == repo) {
			return // unreadable ones are Orphans' to report; our own repository's are inherited
		}
		if len(sharedRoots(roots, journalRoots(j))) == 0 {
			return
		}
		if full := loadJournal(stateDir, repo, name); full != nil {
			found[name] = full
		}
	})
	return found
}

// journalRoots is what the journal's sandbox could write and its audit covers.
func journalRoots(j *auditJournal) []string {
	return append([]string{j.Repo}, j.Options.GitDirs...)
}

// sharedRoots returns the directories both sets of roots hold: for each pair, the
// one that lies in the other.
func sharedRoots(a, b []string) []string {
	var shared []string
	for _, x := range a {
		for _, y := range b {
			switch {
			case x == "" || y == "":
			case hostpath.Within(x, y):
				shared = append(shared, x)
			case hostpath.Within(y, x):
				shared = append(shared, y)
			}
		}
	}
	return shared
}

// takeShared replaces, in base, the items below each part shared with a journal's
// roots by that journal's items there — the newest journal first, so that the
// oldest, taken when no sandbox had run, has the last word.
func takeShared(base *audit.Surface, roots []string, journals map[string]*auditJournal) {
	js := make([]*auditJournal, 0, len(journals))
	for _, j := range journals {
		js = append(js, j)
	}
	sort.Slice(js, func(i, k int) bool { return js[i].Start.After(js[k].Start) })
	for _, j := range js {
		shared := sharedRoots(roots, journalRoots(j))
		below := func(p string) bool {
			for _, s := range shared {
				if hostpath.Within(p, s) {
					return true
				}
			}
			return false
		}
		for p := range base.Items {
			if below(p) {
				delete(base.Items, p)
			}
		}
		for p, it := range j.Base.Items {
			if below(p) {
				base.Items[p] = it
			}
		}
	}
}

// sharedLockKeys names the Git directories a session of repo shares with sessions
// of other repositories: its outside Git dirs (a linked worktree's gitdir and the
// common dir), and its own .git directory, which is the common dir of its linked
// worktrees. Sorted, so that every launcher takes them in one order.
func sharedLockKeys(repo string, gitDirs []string) []string {
	keys := append([]string(nil), gitDirs...)
	if fi, err := os.Lstat(filepath.Join(repo, ".git")); err == nil && fi.IsDir() {
		keys = append(keys, filepath.Join(repo, ".git"))
	}
	sort.Strings(keys)
	return slices.Compact(keys)
}

// takeSharedLocks takes the audit locks of keys (sharedLockKeys), after the
// repository's own: a baseline that takes a shared part from another session's
// journal then sees that journal whole — written before its scan, or its
// session's command not yet started — and no audit moves a shared file meanwhile.
// Taken in the order of their names, each once: two paths to one directory name
// one lock (auditLockName).
func takeSharedLocks(stateDir string, keys []string) (unlock func(), err error) {
	var held []func()
	unlock = func() {
		for i := len(held) - 1; i >= 0; i-- {
			held[i]()
		}
	}
	byName := map[string]string{}
	for _, k := range keys {
		byName[auditLockName(k)] = k
	}
	names := slices.Sorted(maps.Keys(byName))
	for _, n := range names {
		u, err := takeAuditLock(stateDir, byName[n], n)
		if err != nil {
			unlock()
			return nil, err
		}
		held = append(held, u)
	}
	return unlock, nil
}

// lockShared is takeSharedLocks for an audit, which runs whatever happens: a lock
// that cannot be had is reported on w and the audit goes on without it.
func lockShared(w io.Writer, stateDir string, keys []string) (unlock func()) {
	unlock, err := takeSharedLocks(stateDir, keys)
	if err != nil {
		fmt.Fprintf(w, "agentbox: warning: %v; going on without it\n", err)
		return func() {}
	}
	return unlock
}
