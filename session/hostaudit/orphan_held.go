package hostaudit

import (
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/agentbox/agentbox/gitguard/audit"
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
// the journal holds for it, and puts them in j.Options. A repository that is not
// the one the session wrote stops the audit (ok false; the lines say why and what
// to do); a Git directory that is not is left out of it, said in a line. A journal
// with no identities (written before they were) is audited by path, as then.
func holdJournaled(cfg *Config, j *auditJournal) (held []*audit.Held, ok bool) {
	if len(j.IDs) == 0 {
		return nil, true
	}
	since := j.Start.Format(time.RFC3339)
	h, why := holdSame(j.Repo, j.IDs)
	if why != "" {
		fmt.Fprintf(cfg.Stderr, "agentbox: audit: %s: the session of %s (launcher pid %d) was killed before its audit, and %s; not audited, its pending audit dropped: if you moved that directory, run agentbox audit where it lies now before running git there\n",
			termsafe.Quote(j.Repo), since, j.PID, why)
		return nil, false
	}
	held = append(held, h)
	j.Options.Held = h
	dirs := j.Options.GitDirs[:0:0]
	for _, g := range j.Options.GitDirs {
		g = filepath.Clean(g)
		if _, known := j.IDs[g]; !known {
			dirs = append(dirs, g) // audited by path, as the journal's writer would
			continue
		}
		h, why := holdSame(g, j.IDs)
		if why != "" {
			fmt.Fprintf(cfg.Stderr, "agentbox: audit: %s: the session of %s (launcher pid %d) was killed before its audit, and its Git directory %s; that directory is not audited: if you moved it, run agentbox audit in its repository before running git there\n",
				termsafe.Quote(j.Repo), since, j.PID, why)
			continue
		}
		held = append(held, h)
		dirs = append(dirs, g)
		j.Options.HeldGitDirs = append(j.Options.HeldGitDirs, h)
	}
	j.Options.GitDirs = slices.Clip(dirs)
	return held, true
}

// holdSame holds the directory at path when it is the one ids names there;
// otherwise why says, as a clause, what lies there instead.
func holdSame(path string, ids map[string]audit.DirID) (h *audit.Held, why string) {
	h, err := audit.Hold(path)
	if err != nil {
		return nil, fmt.Sprintf("%s cannot be opened now (%v): it was moved or removed since", termsafe.Quote(path), termsafe.String(err.Error()))
	}
	if !h.Is(ids[path]) {
		h.Close()
		return nil, fmt.Sprintf("%s is another directory now (its device, inode or birth time differ): it was moved or replaced since", termsafe.Quote(path))
	}
	return h, ""
}
