package hostaudit

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"

	"github.com/agentbox/agentbox/gitguard"
	"github.com/agentbox/agentbox/gitguard/audit"
	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/termsafe"
	"github.com/agentbox/agentbox/mounts"
)

// A linked worktree's session also writes Git directories outside the repository:
// the main repository's common dir, and the worktree's own gitdir in it
// (COMMON/worktrees/NAME). A process that can write their parents can rename one
// away at the session's end and put a clean directory or a symlink at its path, so
// they are held from the baseline on and audited wherever they lie then, as the
// repository is (gitguard/audit/audit_held_linux.go).

// holdGitDirs opens each of gitDirs, and the linked worktree's own gitdir when
// gitDirs holds its common dir, and returns the list the audit scans and the
// directories held.
func holdGitDirs(repo string, gitDirs []string) ([]string, []*audit.Held, error) {
	if len(gitDirs) == 0 {
		return nil, nil, nil
	}
	dirs := slices.Clone(gitDirs)
	if w, err := gitguard.FindLinkedWorktree(repo); err == nil && w != nil && slices.Contains(dirs, w.CommonDir) && !slices.Contains(dirs, w.GitDir) {
		dirs = append(dirs, w.GitDir)
	}
	var held []*audit.Held
	for _, d := range dirs {
		h, err := audit.Hold(d)
		if err != nil {
			closeAll(held)
			return nil, nil, fmt.Errorf("audit baseline: %s: %w", d, err)
		}
		held = append(held, h)
	}
	return dirs, held, nil
}

func closeAll(held []*audit.Held) {
	for _, h := range held {
		h.Close()
	}
}

// UnboundGitDir is the first writable Git dir whose audit does not hold the
// directory the plan binds (ids: mounts.Session.SourceIDs), "" when none.
func (a *Auditor) UnboundGitDir(ids map[string]mounts.FileID) string {
	if a == nil {
		return ""
	}
	for _, h := range a.heldGitDirs {
		if id, ok := ids[h.Path]; ok && (h.Dev != id.Dev || h.Ino != id.Ino) {
			return h.Path
		}
	}
	return ""
}

// movedGitDirLines says, a line each, which held Git dirs are no longer at their
// path, and where they were audited.
func movedGitDirLines(cur *audit.Surface) []string {
	var lines []string
	for from, to := range cur.MovedGitDirs {
		if to == "" {
			lines = append(lines, fmt.Sprintf("Git directory %s was removed during the session; nothing of it left to audit", termsafe.Quote(from)))
			continue
		}
		lines = append(lines, fmt.Sprintf("Git directory %s was moved during the session to %s; audited there (something else may be at its path now)", termsafe.Quote(from), termsafe.Quote(to)))
	}
	sort.Strings(lines)
	return lines
}

// nowPaths are where the directories the scan cur read lie now.
func nowPaths(cur *audit.Surface) []string {
	out := []string{cur.Now}
	for _, to := range cur.MovedGitDirs {
		if to != "" {
			out = append(out, filepath.Clean(to))
		}
	}
	return out
}

// inherit is the baseline a session takes from the pending session j
// (audit_shared.go). The two may audit different Git dirs outside the
// repository: a linked worktree's session writes its common dir, a session granted
// the worktree with --add-dir does not. A baseline scanned with other Git dirs
// than the end scan sees the worktree's .git file lead elsewhere (inside or out)
// and lacks what lies in the Git dirs it did not scan, which the end scan would
// take for new: the worktree's .git file, or the user's own common-dir config,
// quarantined. So this session's scans cover both sessions' Git dirs (opt), and
// the baseline gets, for what lies in a Git dir only this session audits (which
// the pending session could not write), this launch's scan of it.
func inherit(j *auditJournal, opt *audit.ScanOptions, held *audit.Held) (*audit.Surface, error) {
	var only []string // this session's Git dirs that j did not audit
	for _, d := range opt.GitDirs {
		if !slices.Contains(j.Options.GitDirs, d) {
			only = append(only, d)
		}
	}
	for _, d := range j.Options.GitDirs {
		if !slices.Contains(opt.GitDirs, d) {
			opt.GitDirs = append(opt.GitDirs, d)
		}
	}
	if len(only) == 0 {
		return j.Base, nil
	}
	scan := *opt
	scan.Held = held
	own, err := audit.Scan(held.Path, scan)
	if err != nil {
		return nil, err
	}
	base := *j.Base
	base.Items = maps.Clone(j.Base.Items)
	for p, it := range own.Items {
		if _, ok := base.Items[p]; ok || hostpath.Within(p, held.Path) {
			continue
		}
		for _, d := range only {
			if hostpath.Within(p, d) && !withinAny(p, j.Options.GitDirs) {
				base.Items[p] = it
			}
		}
	}
	return &base, nil
}

func withinAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if hostpath.Within(p, d) {
			return true
		}
	}
	return false
}
