package hostaudit

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agentbox/agentbox/gitguard/audit"
	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/termsafe"
)

// A killed launcher's audit runs in a later process, which has no descriptor of
// the directories that session wrote, only their paths. In between, a directory
// may have been moved away (its plant with it) or replaced by another, such as a
// fresh clone: audited by path, the wrong directory's own hooks and configs would
// be taken for the session's plants and moved aside, and the one the session
// wrote never read. So the journal holds each directory's identity (device, inode,
// birth time), and the audit reads only a directory that still has it.

// holdJournaled holds the directories j names, each checked against the identity
// the journal holds for it, and puts them in j.Options. A Git directory that is not
// the one the session wrote is left out of the audit, said in a line. A repository
// that is not stops the audit of its working tree: its Git directories that still
// are the ones the session wrote (a linked worktree's common dir, which the main
// worktree's Git reads) are audited alone (ScanOptions.GitDirsOnly), and one line
// says what was not and what to do; with none, ok is false. A journal with no
// identities (written before they were) is audited by path, as then. The
// repository is held at path at, the journal's or another path to the same
// directory; the scan takes the journal's paths for it.
func holdJournaled(cfg *Config, j *auditJournal, at string) (held []*audit.Held, ok bool) {
	if len(j.IDs) == 0 {
		return nil, true
	}
	since := j.Start.Format(time.RFC3339)
	h, why := holdSameAt(at, j.Repo, j.IDs)
	if h != nil {
		held = append(held, h)
		j.Options.Held = h
	}
	var dirs, same, other []string
	for _, g := range j.Options.GitDirs {
		g = filepath.Clean(g)
		if _, known := j.IDs[g]; !known {
			if h != nil {
				dirs = append(dirs, g) // audited by path, as the journal's writer would
			}
			continue
		}
		gh, gwhy := holdSame(g, j.IDs)
		if gwhy != "" {
			other = append(other, g)
			if h != nil {
				fmt.Fprintf(cfg.Stderr, "agentbox: audit: %s: the session of %s (launcher pid %d) was killed before its audit, and its Git directory %s; that directory is not audited: if you moved it, run agentbox audit in its repository before running git there\n",
					termsafe.Quote(j.Repo), since, j.PID, gwhy)
			}
			continue
		}
		held = append(held, gh)
		dirs = append(dirs, g)
		same = append(same, g)
		j.Options.HeldGitDirs = append(j.Options.HeldGitDirs, gh)
	}
	j.Options.GitDirs = slices.Clip(dirs)
	if h != nil {
		return held, true
	}
	if len(same) == 0 {
		fmt.Fprintf(cfg.Stderr, "agentbox: audit: %s: the session of %s (launcher pid %d) was killed before its audit, and %s; not audited, its pending audit dropped: if you moved that directory, run agentbox audit where it lies now before running git there\n",
			termsafe.Quote(j.Repo), since, j.PID, why)
		return held, false
	}
	// A Git directory in one audited (the worktree's gitdir in the common dir's
	// worktrees/) is read as part of it.
	notAudited := []string{"its working tree"}
	for _, g := range other {
		if !slices.ContainsFunc(same, func(s string) bool { return hostpath.Within(g, s) }) {
			notAudited = append(notAudited, termsafe.Quote(g))
		}
	}
	quoted := make([]string, len(same))
	for i, g := range same {
		quoted[i] = termsafe.Quote(g)
	}
	fmt.Fprintf(cfg.Stderr, "agentbox: audit: %s: the session of %s (launcher pid %d) was killed before its audit, and %s; audited now only its Git directories still the ones it wrote (%s), not %s: if you moved that directory, run agentbox audit where it lies now before running git there\n",
		termsafe.Quote(j.Repo), since, j.PID, why, strings.Join(quoted, ", "), strings.Join(notAudited, ", "))
	j.Options.GitDirsOnly = true
	return held, true
}

// holdSame holds the directory at path when it is the one ids names there;
// otherwise why says, as a clause, what lies there instead.
func holdSame(path string, ids map[string]audit.DirID) (h *audit.Held, why string) {
	return holdSameAt(path, path, ids)
}

// holdSameAt is holdSame of the directory ids names at path, held at the path
// at, another name for it; the held directory is named path, as the journal's
// baseline names it.
func holdSameAt(at, path string, ids map[string]audit.DirID) (h *audit.Held, why string) {
	h, err := audit.Hold(at)
	if err != nil {
		return nil, fmt.Sprintf("%s cannot be opened now (%v): it was moved or removed since", termsafe.Quote(at), termsafe.String(err.Error()))
	}
	if !h.Is(ids[path]) {
		h.Close()
		return nil, fmt.Sprintf("%s is another directory now (its device, inode or birth time differ): it was moved or replaced since", termsafe.Quote(at))
	}
	h.Path = filepath.Clean(path)
	return h, ""
}
