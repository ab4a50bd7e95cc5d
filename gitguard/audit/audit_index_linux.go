package audit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/gitguard"
	"github.com/agentbox/agentbox/gitguard/gitconfig"
)

// The index (the staging area) names paths of the working tree, and Git writes
// each entry's blob at its path when the operator discards changes (`git checkout
// -- .`, `git restore .`, `git checkout-index`, `git stash`), then runs the
// post-checkout hook. Git checks a path for a ".git" component when it adds it to
// the index, not when it reads an index file: an index the sandbox wrote with an
// entry ".git/hooks/post-checkout" made the operator's `git checkout -- .` write that
// hook and run it, on the host (Git 2.39). So every index of every Git directory the
// audit reads is read entry by entry (gitguard.UnsafeIndexPaths): a path with a
// ".git", "." or ".." component, or an absolute one, is a danger. A split index keeps
// its entries in the Git directory's sharedindex.* files, read the same way.

// KindIndex is a Git index file, or a split index's shared file.
const KindIndex ItemKind = "index"

// maxIndexSize bounds what the audit reads of one index: 100,000 files make about 10
// MB. A larger one is a danger, since it cannot be checked.
const maxIndexSize = 256 << 20

// indexFiles audits the index and the shared index files of gitdir dir, whose
// config entries (its own and its common dir's) are entries.
func (s *scanner) indexFiles(dir string, entries []gitconfig.Entry) {
	hashSize := 20 // SHA-1, unless the repository's object format is SHA-256
	sparseKept := false
	for _, e := range entries {
		switch {
		case e.Section == "extensions" && e.Key == "objectformat" && strings.EqualFold(e.Value, "sha256"):
			hashSize = 32
		case e.Section == "index" && e.Key == "sparse" && e.Bool():
			sparseKept = true // any of them: a sparse index there may be the operator's
		}
	}
	s.indexFile(filepath.Join(dir, "index"), hashSize, sparseKept)
	for _, e := range s.listIfDir(dir) {
		if strings.HasPrefix(e.Name(), "sharedindex.") && !e.IsDir() {
			s.indexFile(filepath.Join(dir, e.Name()), hashSize, sparseKept)
		}
	}
}

// indexFile audits the index file p: a symlink is recorded as one (Git follows it),
// a file is read entry by entry.
func (s *scanner) indexFile(p string, hashSize int, sparseKept bool) {
	start := time.Now() // before the lstat: every write after it moves the ctime past it
	fi, err := s.lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		s.skip(p, "cannot inspect: %v", err)
		return
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		s.linkItem(p, KindIndex)
		return
	}
	// The fingerprint is the file's identity and times: an index's danger is what
	// Compare weighs, not its content (hashing a large one twice a session costs).
	var sum string
	st, isStat := fi.Sys().(*syscall.Stat_t) // os.FileInfo carries syscall's
	if isStat {
		sum = fmt.Sprintf("%o:%d:%d:%d.%d", fi.Mode().Perm(), fi.Size(), st.Ino, st.Mtim.Sec, st.Mtim.Nsec)
	}
	it := s.add(&Item{Path: p, Kind: KindIndex, Sum: sum})
	if isStat && s.since != nil {
		if l, ok := s.since.indexes[p]; ok && l.id == identityOf(st) {
			for _, d := range l.dangers {
				s.danger(it, d)
			}
			return
		}
	}
	dangers, read := s.indexDangers(p, hashSize, sparseKept)
	for _, d := range dangers {
		s.danger(it, d)
	}
	if read && isStat && s.launch != nil && st.Ctim.Nano() < start.Add(-indexSettled).UnixNano() {
		s.launch.noteIndex(p, identityOf(st), dangers)
	}
}

// indexDangers reads the index p and says what is dangerous in it; read is false
// when it could not be read as an index. sparseKept: a config Git reads for this
// Git directory turns index.sparse on.
func (s *scanner) indexDangers(p string, hashSize int, sparseKept bool) (dangers []string, read bool) {
	names, err := s.readIndex(p, hashSize)
	if err != nil {
		return []string{fmt.Sprintf("cannot be read as an index, so cannot be checked (%v)%s", err, indexAfterMove)}, false
	}
	if names.SparseDirs > 0 && !sparseKept {
		// Git keeps an index sparse only where index.sparse is on, and expands any
		// other at every read, building entries from the trees its directory entries
		// name: a tree the session wrote with a name Git refuses ("..", ".git") makes
		// every Git command of the operator fail (Git 2.39 crashes) until the index is
		// rebuilt. Git itself writes no such index here, so it is moved out.
		dangers = append(dangers, fmt.Sprintf("is a sparse index (%d directory entries) though no config Git reads for it turns index.sparse on: Git expands it at every read, and a tree it names with a path Git refuses makes every Git command fail%s", names.SparseDirs, indexAfterMove))
	}
	if names.N == 0 {
		return dangers, true
	}
	bad, n := names.Bad, names.N
	named := make([]string, len(bad))
	for i, b := range bad {
		named[i] = oneLine(b)
		if b == "" {
			named[i] = `""` // an entry without a name
		}
	}
	more := ""
	if n > len(bad) {
		more = fmt.Sprintf(" and %d more", n-len(bad))
	}
	return append(dangers, fmt.Sprintf("names %s%s outside the working tree or inside a Git directory: git checkout -- . writes them there (a hook it then runs)%s", strings.Join(named, ", "), more, indexAfterMove)), true
}

// An end scan takes the launch scan's reading of an index whose lstat has not
// changed since, instead of reading 10 MB again on the session's critical path.
// That is sound only where no write can leave the lstat as it was:
//
//   - Every write(2), truncate, rename over it or re-creation under the same inode
//     number sets the ctime to the time of the change, which user space cannot set
//     back. The kernel takes that time from a coarse clock (a tick behind at most)
//     and truncates it to the file system's granularity (2 s at the coarsest), so a
//     change made after the launch's lstat can only keep the ctime it saw when that
//     ctime was already older than indexSettled at the lstat: a younger index
//     (Git's "racy" case) is read again at the end.
//   - A write through a shared mapping whose page is already writable changes the
//     content without a ctime. Such a page was made writable by a fault, which set
//     the ctime, in a process that lives no longer than its session; that fault
//     came after its own session's launch scan read the index, so that session's
//     end scan finds the ctime changed and reads the index again. A session cannot
//     hide a plant from its own audit this way, only from another session's, and a
//     killed launcher's missed audit (session/hostaudit) reads every index whole.
//
// Only a session's own end scan (ScanOptions.Since) takes a reading, and only the
// one its launch scan made of the same path.

// indexReads counts the indexes read (tests: which scan took the launch's reading).
var indexReads atomic.Int64

// indexSettled is how old an index's ctime must be at the launch's lstat for the
// end scan to take the launch's reading of it (above).
const indexSettled = 3 * time.Second

// indexID is what an index's lstat says of its identity and last change.
type indexID struct {
	dev, ino     uint64
	mode         uint32
	size         int64
	mtime, ctime int64
}

func identityOf(st *syscall.Stat_t) indexID {
	return indexID{dev: uint64(st.Dev), ino: st.Ino, mode: st.Mode, size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}

// launchIndex is the launch scan's reading of an index.
type launchIndex struct {
	id      indexID
	dangers []string
}

// noteIndex keeps the launch scan's reading of the index p for the end scan.
func (l *Launch) noteIndex(p string, id indexID, dangers []string) {
	if l.indexes == nil {
		l.indexes = map[string]launchIndex{}
	}
	l.indexes[p] = launchIndex{id: id, dangers: dangers}
}

// indexAfterMove tells the operator what to do once a dangerous index is moved out:
// without one, Git shows every tracked file deleted and untracked.
const indexAfterMove = "; once it is moved out, git reset rebuilds the index from HEAD (the working tree's files stay as they are)"

// readIndex reads the index file p (object ids of hashSize bytes), never following
// a symlink or blocking, and returns up to maxIndexNamed of the paths it names that
// Git must not write, and how many there are.
func (s *scanner) readIndex(p string, hashSize int) (gitguard.IndexNames, error) {
	indexReads.Add(1)
	fd, err := s.relax.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return gitguard.IndexNames{}, err
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return gitguard.IndexNames{}, err
	case !fi.Mode().IsRegular():
		return gitguard.IndexNames{}, fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	case fi.Size() > maxIndexSize:
		return gitguard.IndexNames{}, fmt.Errorf("larger than %d MiB", maxIndexSize>>20)
	}
	return gitguard.ReadIndexNames(bufio.NewReaderSize(io.LimitReader(f, maxIndexSize), 64<<10), hashSize)
}
