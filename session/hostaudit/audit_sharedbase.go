package hostaudit

import (
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
// journal name.
func overlappingJournals(stateDir, repo string, roots []string) map[string]*auditJournal {
	found := map[string]*auditJournal{}
	own := journalPrefix(repo)
	pendingJournals(stateDir, repo, func(name string, j *auditJournal) {
		if j == nil || (strings.HasPrefix(name, own) && j.Repo == repo) {
			return // unreadable ones are Orphans' to report; our own repository's are inherited
		}
		if len(sharedRoots(roots, journalRoots(j))) > 0 {
			found[name] = j
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
