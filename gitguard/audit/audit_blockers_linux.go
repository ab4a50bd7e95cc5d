package audit

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Blockers (docs/promises.md P13). Git opens some files by name with a plain blocking
// open(2): a FIFO in their place hangs it — the operator's next `git status` on the
// host, and agentbox's own recorder (whose Git reads the working tree) — and a device
// makes it read whatever the device gives. No Git file is legitimately a FIFO, socket
// or device, so one that a session leaves at such a name is reported and moved aside
// like a planted hook. Found beyond the .gitignore of the issue that named the class
// (each checked against Git 2.39 by blocking it): .gitattributes, .gitmodules,
// .mailmap and .git itself in every working-tree directory; in every gitdir HEAD and
// the loose ref it names, packed-refs, index, config, commondir, the alternates and
// grafts lists, info/exclude and info/attributes, shallow, the *_HEAD files.

// treeFileGitOpens reports whether Git opens a working-tree entry of this name.
func treeFileGitOpens(name string) bool {
	switch name {
	case ".gitignore", ".gitattributes", ".gitmodules", ".mailmap", ".git":
		return true
	}
	return false
}

// gitdirFilesGitOpens are the files of a gitdir Git opens by name.
var gitdirFilesGitOpens = []string{
	"HEAD", "packed-refs", "index", "config", "config.worktree", "commondir", "gitdir",
	"shallow", "FETCH_HEAD", "ORIG_HEAD", "MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD",
	"AUTO_MERGE", "objects/info/alternates", "info/grafts", "info/exclude",
	"info/attributes", "info/sparse-checkout", "logs/HEAD",
}

// special reports whether t is a FIFO, socket or device: a type Git never expects.
func special(t fs.FileMode) bool {
	return t&(fs.ModeNamedPipe|fs.ModeSocket|fs.ModeDevice|fs.ModeCharDevice) != 0
}

// blocker records the special file at p.
func (s *scanner) blocker(p string, t fs.FileMode) {
	what := "a device"
	switch {
	case t&fs.ModeNamedPipe != 0:
		what = "a FIFO"
	case t&fs.ModeSocket != 0:
		what = "a socket"
	}
	s.add(&Item{Path: p, Kind: KindBlocker, Sum: "type:" + t.Type().String(),
		Dangers: []string{fmt.Sprintf("%s where Git opens %s: Git on the host would block on it or read from it", what, oneLine(filepath.Base(p)))}})
}

// gitdirBlockers checks the files of the gitdir dir that Git opens by name, and the
// loose ref its HEAD names. top is dir's whole listing (gitdirTop), nil when there
// is none: a name of the top level is then looked up in it — absent, there is
// nothing to block; present, its type is the listing's (getdents64's, or an lstat
// where that gives none), the type an lstat gives — instead of an lstat each.
func (s *scanner) gitdirBlockers(dir string, top []os.DirEntry) {
	names := gitdirFilesGitOpens
	if ref := headRef(s, dir); ref != "" {
		names = append(names[:len(names):len(names)], ref)
	}
	for _, n := range names {
		p := filepath.Join(dir, n)
		if top != nil && !strings.ContainsRune(n, filepath.Separator) {
			if e := entryNamed(top, n); e != nil && special(e.Type()) {
				s.blocker(p, e.Type())
			}
			continue
		}
		if fi, err := s.lstat(p); err == nil && special(fi.Mode()) {
			s.blocker(p, fi.Mode())
		}
	}
}

// entryNamed is the entry called name in ents (sorted by name), nil when none is.
func entryNamed(ents []os.DirEntry, name string) os.DirEntry {
	i := sort.Search(len(ents), func(i int) bool { return ents[i].Name() >= name })
	if i < len(ents) && ents[i].Name() == name {
		return ents[i]
	}
	return nil
}

// headRef is the ref HEAD names in gitdir ("refs/heads/main"), "" when HEAD is no
// symbolic ref of the usual form (or not a regular file: then it is a blocker).
func headRef(s *scanner, dir string) string {
	p := filepath.Join(dir, "HEAD")
	if fi, err := s.lstat(p); err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	data, _, err := s.read(p, 4<<10)
	if err != nil {
		return ""
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	ref, ok := strings.CutPrefix(strings.TrimSpace(string(line)), "ref: ")
	if !ok || !strings.HasPrefix(ref, "refs/") || strings.Contains(ref, "..") || strings.ContainsRune(ref, 0) {
		return ""
	}
	return filepath.FromSlash(ref)
}
