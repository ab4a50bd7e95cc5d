package audit

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Links out where Git writes. Git writes some files of a gitdir with a plain open(2)
// that follows a symlink: the reflogs (appended on every commit, checkout, reset and
// fetch), FETCH_HEAD, COMMIT_EDITMSG, MERGE_MSG and the other message files, the
// sequencer's, rebase's and bisect's state, rerere's images; and it creates files
// below refs/, logs/ and objects/ through whatever directory stands there. A symlink
// at such a place that leads out of the repository makes the operator's next git
// commit, checkout or fetch on the host write to that file of theirs — a reflog line
// names the branch the session chose, so appended to ~/.bashrc it runs. Git makes
// none of them a symlink that leads out (core.preferSymlinkRefs' HEAD stays inside),
// so a new one is reported and moved aside; the user's own, there at launch, stays.
// Git LFS does the same in lfs/: it creates objects/XX/YY/OID, tmp/ and its caches
// through whatever directory stands there, and prune removes objects by that path;
// and so does git-annex in annex/ (objects/XXX/YYY/KEY/KEY, tmp/, its journal and
// keys database), whose store may be large: past the scan's entry bound the rest
// is reported as not searched, never passed over.

// gitdirWriteDirs are the directories of a gitdir below which Git creates and
// writes files by name; gitdirTopDirs are listed one level deep only (objects/ holds
// a directory per object prefix, and nothing deeper that Git writes by name).
var (
	gitdirWriteDirs = []string{"refs", "logs", "rebase-merge", "rebase-apply", "sequencer", "rr-cache", "NOTES_MERGE_WORKTREE", "lfs", "annex"}
	gitdirTopDirs   = []string{"objects"}
)

// gitdirOutLinks records each symlink that leads out of the repository where Git
// writes in the gitdir dir: its own entries, those of objects/, and every entry below
// gitdirWriteDirs. Entries the scan recorded already (config, hooks, modules/) keep
// their item.
//
// ents is the gitdir's own listing (gitdirTop), listed whether there is one; whole
// whether it is all of the directory, and then a directory of gitdirTopDirs or
// gitdirWriteDirs absent from it, or no directory there, is not looked up: outLinks
// would find it absent or no directory by its lstat, and list nothing.
func (s *scanner) gitdirOutLinks(dir string, ents []os.DirEntry, listed, whole bool) {
	if listed {
		s.outLinksIn(dir, ents, -1)
	}
	for _, d := range gitdirTopDirs {
		if !whole || isDirEntry(entryNamed(ents, d)) {
			s.outLinks(filepath.Join(dir, d), -1)
		}
	}
	for _, d := range gitdirWriteDirs {
		if !whole || isDirEntry(entryNamed(ents, d)) {
			s.outLinks(filepath.Join(dir, d), 0)
		}
	}
}

// gitdirTop lists the gitdir dir once, for its blockers and its links out, where
// and as outLinks lists it: listed says it did (dir a real directory, the scan not
// stopped); whole says the listing is all of it (not cut short by a failure or the
// entry bound), so that a name absent from it is absent.
func (s *scanner) gitdirTop(dir string) (ents []os.DirEntry, listed, whole bool) {
	if s.stopped {
		return nil, false, false
	}
	if fi, err := s.lstat(dir); err != nil || !fi.IsDir() {
		return nil, false, false
	}
	ents, whole = s.readDirComplete(dir)
	if whole && ents == nil {
		ents = []os.DirEntry{} // whole and empty: not "no listing"
	}
	return ents, true, whole
}

func isDirEntry(e os.DirEntry) bool { return e != nil && e.IsDir() }

// outLinks lists dir (a real directory; a symlink in its place was found at its
// parent) and records its entries that are symlinks leading out of the repository;
// with depth >= 0 it descends into its subdirectories, up to the scan's depth bound.
func (s *scanner) outLinks(dir string, depth int) {
	if s.stopped {
		return
	}
	if fi, err := s.lstat(dir); err != nil || !fi.IsDir() {
		return
	}
	if depth > s.opt.MaxDepth {
		s.skip(dir, "Git directory entries nested deeper than %d were not searched for symlinks", s.opt.MaxDepth)
		return
	}
	s.outLinksIn(dir, s.readDir(dir), depth)
}

// outLinksIn is outLinks over the listing ents of dir.
func (s *scanner) outLinksIn(dir string, ents []os.DirEntry, depth int) {
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		switch {
		case strings.Contains(e.Name(), QuarantineSuffix):
			// moved aside by an audit: Git reads and writes no such name
		case e.Type()&fs.ModeSymlink != 0:
			if _, known := s.surface.Items[p]; !known && s.leadsOut(p) {
				link := s.readlink(p)
				s.add(&Item{Path: p, Kind: KindOutLink, Sum: "link:" + link, Link: link,
					Watch: fmt.Sprintf("symlink to %s, outside the repository, where Git writes: the operator's Git would write through it", oneLine(link))})
			}
		case depth >= 0 && e.IsDir():
			s.outLinks(p, depth+1)
		}
	}
}

// leadsOut reports whether the symlink at p leads out of the repository: it
// resolves outside, or dangles towards a path outside (which Git's open would
// create).
func (s *scanner) leadsOut(p string) bool {
	if _, inside := s.resolveInside(p); inside {
		return false
	}
	link := s.readlink(p)
	if link == "" {
		return true
	}
	if !filepath.IsAbs(link) {
		link = filepath.Join(filepath.Dir(p), link)
	}
	_, inside := s.canonInside(link)
	return !inside
}
