package shadow

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/treewalk"
)

// Pricing what a staging reads (docs/promises.md P13: bounded in time and bytes). A file's
// size is the sandbox's to choose and costs it nothing when the file is sparse: a
// `truncate -s 1G` made the record end read and hash a gigabyte of zeros. So before
// a staging lets Git (or the in-place staging) read the working tree, every regular
// file it would read is lstat'ed and priced by its apparent size and by the blocks
// it really holds:
//
//   - a file larger than maxRecordFile is not read;
//   - a file whose blocks on disk fall short of its size by more than sparseSlack
//     is sparse — Git never writes one, and its holes cost reading but not disk;
//   - at a session's end, past maxRecordBytes of content, no further file is read
//     (many medium files that add up). Not at the launch: what the end left out
//     is stored there, before the session, so that no later diff shows it as the
//     session's; it is real content on disk, at most maxRecordFile a file.
//
// What is not read is left out of the record the way a bound's file is (addAll: an
// exclude pattern, and its index entry dropped) and named in the record with the
// reason (Record.NotRecorded). The watch on Git (bounds.go) stops it at a file that
// grew past the bound or became sparse after it was priced, and the record's
// deadline (recordDeadline) bounds the end of a session whatever else happens.

// maxRecordFile is the largest file of the working tree the recorder reads.
const maxRecordFile = 256 << 20

// sparseSlack is how much of a file's size may be missing from its disk blocks
// before it counts as sparse (its last block, filesystems that compress), as the
// snapshot's rule.
const sparseSlack = 1 << 20

// maxRecordBytes bounds the bytes of file content a session's end reads. A variable
// for the tests only.
var maxRecordBytes int64 = 1 << 30

// recordDeadline bounds the host work of a session's end record: past it every Git
// command is stopped and the end state is the start state, with the notes saying
// so. A variable for the tests only.
var recordDeadline = 3 * time.Minute

// Skipped is a path the record does not hold, and why.
type Skipped struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Bounds on what the record names: a session can make millions of paths, each as
// long as the filesystem allows.
const (
	maxNamed   = 50   // Skipped entries kept in a record
	maxNameLen = 512  // bytes of a path kept in a record
	maxPriced  = 2000 // left-out paths one staging gives Git as exclude patterns
	maxIgnored = 20   // ignored paths named in a record
)

// maxUnseenIn bounds the entries unseen.go looks at: changed paths checked against
// the index, and entries walked below nested repositories. A variable for the tests
// only.
var maxUnseenIn = 20000

// price returns what of the walk's regular files a staging of paths (nil: a full
// sweep) must not read, and the bytes of content it may read. Without a walk there
// is nothing to price by: the watch and the deadline bound the staging.
func (s *Store) price(w *treewalk.Walk, paths []string) (skip []Skipped, bytes int64) {
	if w == nil {
		return nil, 0
	}
	repoFd, err := unix.Open(s.Repo, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0
	}
	defer unix.Close(repoFd)
	one := func(rel string) {
		var st unix.Stat_t
		if unix.Fstatat(repoFd, rel, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			return
		}
		if why := costly(st.Size, st.Blocks, bytes, s.byteBound); why != "" {
			skip = append(skip, Skipped{Path: rel, Reason: why})
			return
		}
		bytes += st.Size
	}
	if paths != nil {
		// Files named themselves are lstat'ed; a directory named is staged whole,
		// so its files are taken from the walk.
		dirs := map[string]bool{}
		for _, p := range paths {
			var st unix.Stat_t
			if unix.Fstatat(repoFd, p, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
				dirs[p] = true
				continue
			}
			one(p)
		}
		if len(dirs) > 0 {
			cover := ""
			for _, e := range w.Entries {
				if cover != "" && strings.HasPrefix(e.Rel, cover) {
					if e.Mode == unix.S_IFREG {
						one(e.Rel)
					}
					continue
				}
				cover = ""
				if e.IsDir() && dirs[e.Rel] {
					cover = e.Rel + "/"
				}
			}
		}
		return skip, bytes
	}
	// A sweep reads what the index does not hold as it is: a file whose inode or
	// ctime is not its entry's (no index: every file).
	idx, _ := readIndex(filepath.Join(s.Dir, "index"))
	held := make(map[string]indexEntry, len(idx))
	for _, ie := range idx {
		held[ie.path] = ie
	}
	for _, e := range w.Entries {
		if e.Mode != unix.S_IFREG {
			continue
		}
		if ie, ok := held[e.Rel]; ok && ie.ino == e.Ino && ie.ctime == e.Ctime && ie.size != 0 {
			continue
		}
		one(e.Rel)
	}
	return skip, bytes
}

// costly says why a regular file of size bytes holding blocks 512-byte blocks is
// not read after read bytes of others, within bound bytes in all (0: no bound); ""
// when it is read.
func costly(size, blocks, read, bound int64) string {
	switch {
	case blocks*512+sparseSlack < size:
		return fmt.Sprintf("sparse file (%s, %s on disk): Git never writes one", formatSize(size), formatSize(blocks*512))
	case size > maxRecordFile:
		return fmt.Sprintf("%s, larger than the recorder's bound of %s", formatSize(size), formatSize(maxRecordFile))
	case bound > 0 && read+size > bound:
		return fmt.Sprintf("%s past the record's bound of %s of content read at a session's end", formatSize(size), formatSize(bound))
	}
	return ""
}

// formatSize prints a byte count in the largest binary unit it fills.
func formatSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// shortPath bounds a path kept in a record.
func shortPath(p string) string {
	if len(p) > maxNameLen {
		return p[:maxNameLen] + "…"
	}
	return p
}
