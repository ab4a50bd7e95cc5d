package shadow

import (
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/treewalk"
)

// Git's stat cache, and what the recorder does so that it never hides a change.
//
// `git add` skips a tracked file whose lstat matches the index entry's stat data,
// and Git compares those in whole seconds (Debian's Git, like Git's default build,
// is built without USE_NSEC: a file rewritten at the same size within the second of
// its recorded mtime and ctime looks unchanged). Git's defence is the "racy" rule:
// an entry whose mtime is not before the index file's own mtime (in seconds) is
// checked by content, and every Git that writes the index first checks its racy
// entries against the working tree and smudges (zeroes the size of) the ones that
// changed. Three things broke that rule here, and a session's edit could be missing
// from its record (TestSessionRecord failed about once in 150 runs under load):
//
//   - `write-tree` rewrites the index to store the cache tree, with no working tree
//     to check racy entries against: the index's mtime moved past entries that were
//     racy, while the sandbox was already running (the start's tree is written in
//     the background), and an edit made in that second looked clean at the end.
//   - The recorder's own index writes (stageInPlace) did no racy check either.
//   - An mtime is the sandbox's to set (utimensat): an entry whose mtime was set
//     back is never racy, and an edit within the second of its ctime, with the
//     mtime set back again, fools the stat check for good.
//
// So: (1) an index written by the recorder or by write-tree keeps the index file's
// previous mtime (keepIndexTime): racy entries stay racy, and the recorder's own
// entries were fstat'ed after that moment. (2) Before Git stages, every entry that
// the walk's nanosecond ctime shows changed within the second Git compares is
// smudged (smudgeUnlikeWalk): among the paths changedPaths names before a limited
// `git add`, and among all entries before a full sweep, so Git hashes each of them
// whatever its stat data say.

// indexLayout is where an index's entries and its extensions are: offsets[i] is the
// i-th entry's, extensions start at ext, and the trailing checksum at len(b)-20.
// An offset is below maxIndexSize (4 GiB), so 4 bytes hold it: half the fresh
// heap of an int for each of a big index's entries.
type indexLayout struct {
	offsets []uint32
	ext     int
}

// errIndexLayout: the index is not one the recorder edits (version 2 or 3, whole,
// with a good checksum).
var errIndexLayout = errors.New("index not in a form the recorder edits")

// layoutOf checks the index b (header, entries, checksum) and returns its layout.
func layoutOf(b []byte) (indexLayout, error) {
	if len(b) < 12+20 {
		return indexLayout{}, errIndexLayout
	}
	body := b[:len(b)-20]
	if sum := sha1.Sum(body); !bytes.Equal(sum[:], b[len(b)-20:]) {
		return indexLayout{}, errIndexLayout
	}
	n, err := indexHeader(body)
	if err != nil {
		return indexLayout{}, errIndexLayout
	}
	l := indexLayout{offsets: make([]uint32, 0, n)}
	if l.ext, err = eachEntry(body, n, func(off, _, _ int) error {
		if off > math.MaxUint32 {
			return errIndexLayout
		}
		l.offsets = append(l.offsets, uint32(off))
		return nil
	}); err != nil {
		return indexLayout{}, errIndexLayout
	}
	return l, nil
}

// smudge zeroes the recorded size of every entry of the shadow index for which
// stale says so (p: its path; e: its bytes from the ctime on), so that Git hashes
// the file whatever its stat data say, and writes the index back with its mtime
// kept. No index is nothing to smudge.
func (s *Store) smudge(stale func(p, e []byte) bool) error {
	indexPath := filepath.Join(s.Dir, "index")
	b, before, release, err := mapIndex(indexPath)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer release()
	l, releaseLayout, err := s.indexLayout(b, &before)
	if err != nil {
		return err
	}
	defer releaseLayout()
	x := indexEntries{b: b, off: l.offsets}
	var smudged []int
	for i, off := range l.offsets {
		e := b[off:]
		if binary.BigEndian.Uint32(e[36:40]) == 0 || binary.BigEndian.Uint32(e[24:28]) == 0o160000 {
			continue // already smudged; a nested repository Git always checks
		}
		if stale(x.path(i), e) {
			smudged = append(smudged, int(off))
		}
	}
	if len(smudged) == 0 {
		return nil
	}
	// The mapping is read-only: the smudged index is a copy.
	out := bytes.Clone(b)
	for _, off := range smudged {
		binary.BigEndian.PutUint32(out[off+36:off+40], 0)
	}
	body := out[:len(out)-20]
	sum := sha1.Sum(body)
	copy(out[len(out)-20:], sum[:])
	if err := writeIndexKeepingTime(indexPath, before.Mtim, out); err != nil {
		return err
	}
	s.relabelLayout(indexKey(b, &before), sum[:])
	return nil
}

// smudgeUnlikeWalk smudges, before Git stages, the entries that the walk w found
// changed where Git's stat check would not: the same inode, and a ctime that
// differs from the entry's in its nanoseconds only (another second, or another
// inode, Git sees itself; trustctime is on). paths, when not nil, limits it to those
// (a limited `git add` looks at no other); nil is every entry (a full sweep).
// Without a walk, only rule (1) stands. A change made after the walk has a ctime
// after its clock, which the next staging's walk finds.
func (s *Store) smudgeUnlikeWalk(w *treewalk.Walk, paths []string) error {
	if w == nil {
		return nil
	}
	var only map[string]bool
	if paths != nil {
		only = make(map[string]bool, len(paths))
		for _, p := range paths {
			only[p] = true
		}
	}
	type id struct {
		ino   uint32
		ctime int64
	}
	n := len(w.Entries)
	if paths != nil {
		n = len(paths)
	}
	seen := make(map[string]id, n)
	for _, e := range w.Entries {
		if !e.IsDir() && (only == nil || only[e.Rel]) {
			seen[e.Rel] = id{e.Ino, e.Ctime}
		}
	}
	if len(seen) == 0 {
		return nil
	}
	return s.smudge(func(p, e []byte) bool {
		got, ok := seen[string(p)]
		if !ok {
			return false // gone, or not walked: Git's lstat tells
		}
		sec, nsec := int64(binary.BigEndian.Uint32(e[0:4])), int64(binary.BigEndian.Uint32(e[4:8]))
		return got.ino == binary.BigEndian.Uint32(e[20:24]) && got.ctime/1_000_000_000 == sec &&
			got.ctime%1_000_000_000 != nsec
	})
}

// writeIndexKeepingTime replaces the index at indexPath with the concatenation of
// parts, through Git's lock file, and gives it the mtime mtime (rule 1 above).
func writeIndexKeepingTime(indexPath string, mtime unix.Timespec, parts ...[]byte) error {
	return replaceIndex(indexPath, mtime, func(f *os.File) error {
		for _, b := range parts {
			if _, err := f.Write(b); err != nil {
				return err
			}
		}
		return nil
	})
}

// indexPatch is bytes written over an index's at off.
type indexPatch struct {
	off  int
	data []byte
}

// indexCopy is a new index being written through Git's lock file: the first n
// bytes of the index ix, copied by the kernel (page cache to page cache, not
// through this process) on a goroutine of its own from startIndexCopy on, beside
// the work that decides what is written over them (the staging in place's blobs,
// trees and checksum); then finish writes that, gives the file the old index's
// mtime (rule 1 above) and renames it over the index, or abort removes it. One of
// the two is called on every path, before ix is closed: the index stays as it was
// until finish renames, and no lock is left.
type indexCopy struct {
	lock string
	fd   int // -1 once closed
	n    int
	done chan struct{}
	err  error // the copy's; read after done
}

// startIndexCopy creates indexPath's lock file (exclusively: a Git that holds it
// keeps the recorder out) and starts copying the first n bytes of ix into it.
func startIndexCopy(indexPath string, ix *mappedIndex, n int) (*indexCopy, error) {
	c := &indexCopy{lock: indexPath + ".lock", n: n, done: make(chan struct{})}
	fd, err := unix.Open(c.lock, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, &os.PathError{Op: "create", Path: c.lock, Err: err}
	}
	c.fd = fd
	go func() {
		defer close(c.done)
		c.err = copyIndexBytes(fd, ix, n)
	}()
	return c, nil
}

// finish writes patches over the copy and tail after it, and renames it over
// indexPath with the mtime mtime; on any failure the index is as it was and the
// lock file is gone.
func (c *indexCopy) finish(indexPath string, mtime unix.Timespec, patches []indexPatch, tail []byte) error {
	<-c.done
	err := c.err
	for _, p := range patches {
		if err == nil {
			err = pwriteAll(c.fd, p.data, p.off)
		}
	}
	if err == nil {
		err = pwriteAll(c.fd, tail, c.n)
	}
	if cerr := unix.Close(c.fd); err == nil {
		err = cerr
	}
	c.fd = -1
	return installIndexLock(c.lock, indexPath, mtime, err)
}

// abort waits for the copy and removes the lock file, unless finish ran.
func (c *indexCopy) abort() {
	<-c.done
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
		os.Remove(c.lock)
	}
}

// pwriteAll writes b at off in fd.
func pwriteAll(fd int, b []byte, off int) error {
	for len(b) > 0 {
		n, err := unix.Pwrite(fd, b, int64(off))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b, off = b[n:], off+n
	}
	return nil
}

// replaceIndex writes the index at indexPath anew through Git's lock file (write
// fills it), gives it the mtime mtime, and renames it over the index; on any
// failure the index is as it was and no lock is left.
func replaceIndex(indexPath string, mtime unix.Timespec, write func(*os.File) error) error {
	lock := indexPath + ".lock"
	f, err := os.OpenFile(lock, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return installIndexLock(lock, indexPath, mtime, err)
}

// installIndexLock ends a write of the index through its lock file lock, written
// and closed: unless err (the write's) is set, the lock gets the old index's mtime
// (rule 1 above) and is renamed over indexPath; on any failure the lock is removed
// instead, so the index stays as it was and no lock is left. It returns the first
// error.
func installIndexLock(lock, indexPath string, mtime unix.Timespec, err error) error {
	if err == nil {
		err = keepIndexTime(lock, mtime)
	}
	if err == nil {
		err = os.Rename(lock, indexPath)
	}
	if err != nil {
		os.Remove(lock)
	}
	return err
}

// copyIndexBytes writes the first n bytes of ix to the start of the empty file
// dst: by copy_file_range, or, where the kernel or filesystem cannot, from the
// mapping.
func copyIndexBytes(dst int, ix *mappedIndex, n int) error {
	var done int64
	for done < int64(n) {
		in, out := done, done
		c, err := unix.CopyFileRange(ix.fd, &in, dst, &out, n-int(done), 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil || c == 0 {
			if done > 0 && err != nil {
				return err
			}
			break
		}
		done += int64(c)
	}
	if done == int64(n) {
		return nil
	}
	if done != 0 {
		return fmt.Errorf("index copy stopped at %d of %d bytes", done, n)
	}
	for done < int64(n) {
		c, err := unix.Pwrite(dst, ix.b[done:n], done)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		done += int64(c)
	}
	return nil
}

// keepIndexTime sets the mtime of the index file at p back to mtime: the index file's
// mtime before it was rewritten. Entries racy against the old index stay racy, and
// an earlier mtime only makes Git check more entries by content.
func keepIndexTime(p string, mtime unix.Timespec) error {
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{{Nsec: unix.UTIME_OMIT}, mtime}, unix.AT_SYMLINK_NOFOLLOW)
}
