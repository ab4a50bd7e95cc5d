package snapshot

// The content-addressed snapshot store (docs/promises.md P8, P13). The packs that make
// up nearly all of .git are immutable and identical launch after launch, so a
// launch should not copy them again. The store keeps every file's content
// once, as a blob named by its SHA-256, and each snapshot is a small record naming
// the tree of its gitdir; a tree is itself a blob (one text line per entry), so an
// unchanged directory is one blob shared by every snapshot, and a snapshot of
// unchanged metadata costs a record of a few hundred bytes.
//
// Layout, below the store directory (by default STATE/snapshots):
//
//	KEY/                       one per repository: base name + hash of its path
//	  repo                     the repository's path (for gc and for people)
//	  lock                     flock(2): one save, prune or collection at a time
//	  stat-cache               path → (dev, inode, size, mtime, ctime, blob)
//	  blobs/ab/cdef…           contents and trees, mode 0400, named by SHA-256
//	  snaps/STAMP.snap         one record per snapshot (JSON)
//
// A file whose device, inode, size, mtime and ctime match the stat cache is not read
// again: nothing inside the sandbox can set a ctime (utimensat sets it to now), so a
// match means the content is what was hashed. Entries whose ctime is within a
// second of the save are not cached (Git's "racy" rule), and a cached blob that is
// missing from the store is read again.

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
)

// StoreFormat is the version of the store's records and trees.
const StoreFormat = 2

// RecordSuffix ends the name of a snapshot record.
const RecordSuffix = ".snap"

// Record is a snapshot record: the manifest and the trees it names.
type Record struct {
	StoreFormat int      `json:"store_format"`
	Manifest    Manifest `json:"manifest"`
	Common      string   `json:"common"`             // tree of the common dir
	Worktree    string   `json:"worktree,omitempty"` // tree of a linked worktree's gitdir
	DotGit      string   `json:"dotgit,omitempty"`   // blob of the ".git" pointer file
	DotGitMode  uint32   `json:"dotgit_mode,omitempty"`
	// The top directories' own permission bits and mtimes (a tree holds those
	// of its entries only).
	CommonMode    uint32   `json:"common_mode,omitempty"`
	CommonMtime   int64    `json:"common_mtime,omitempty"`
	WorktreeMode  uint32   `json:"worktree_mode,omitempty"`
	WorktreeMtime int64    `json:"worktree_mtime,omitempty"`
	Bytes         int64    `json:"bytes"`     // file bytes the snapshot describes
	NewBytes      int64    `json:"new_bytes"` // of which were read and stored by this save
	Entries       int      `json:"entries"`
	Skipped       []string `json:"skipped,omitempty"` // entries not saved, and why
}

// treeEntry is one line of a tree blob:
//
//	KIND MODE MTIME_NS SIZE REF NAME
//
// KIND is f (file), d (directory) or l (symlink); MODE the permission bits in octal;
// REF the blob (f), the tree (d) or the quoted target (l); NAME quoted with
// strconv.Quote, so that any byte of a file name survives.
type treeEntry struct {
	kind  byte
	mode  uint32
	mtime int64
	size  int64
	ref   string
	name  string
}

func (e treeEntry) line() string {
	ref := e.ref
	if e.kind == 'l' {
		ref = strconv.Quote(ref)
	}
	return fmt.Sprintf("%c %o %d %d %s %s\n", e.kind, e.mode, e.mtime, e.size, ref, strconv.Quote(e.name))
}

// statKey is what the stat cache compares.
type statKey struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64
}

type statEntry struct {
	key  statKey
	blob string
}

// repoStore is one repository's part of the store, locked for the whole operation.
type repoStore struct {
	dir   string // STORE/KEY
	lock  *os.File
	cache map[string]statEntry // loaded stat cache
	next  map[string]statEntry // this save's
	dirty bool
	// written are the blobs this save created: removed again when it fails.
	written []string
	budget  *budget
	// overEntries counts the entries left out beyond the entry bound; firstOver
	// is the first of them.
	overEntries int
	firstOver   string
	newBytes    int64
	treeBytes   int64
	total       int64
	skipped     []string
	specials    int // entries skipSpecial counted
	start       time.Time
	progress    *progress
	listing     *listing // what this save visited (store_unchanged_linux.go)
}

// storeKey names a repository's part of the store: its base name, for people, and a
// hash of its path, so that two repositories of the same name never share one.
func storeKey(repo string) string {
	sum := sha256.Sum256([]byte(repo))
	base := []byte(filepath.Base(repo))
	for i, c := range base {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			base[i] = '_'
		}
	}
	if len(base) > 40 {
		base = base[:40]
	}
	return strings.TrimLeft(string(base), ".") + "-" + hex.EncodeToString(sum[:8])
}

// lockWait bounds how long a save waits for another save of the same repository.
const lockWait = 2 * time.Minute

// openRepoStore creates (when needed) and locks the part of the store of repo.
func openRepoStore(store, repo string) (*repoStore, error) {
	dir := filepath.Join(store, storeKey(repo))
	for _, d := range []string{store, dir, filepath.Join(dir, "blobs"), filepath.Join(dir, "snaps")} {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
		if fi, err := os.Lstat(d); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("%s: not a directory", d)
		}
	}
	lf, err := lockStore(dir, unix.LOCK_EX)
	if err != nil {
		return nil, err
	}
	rs := &repoStore{dir: dir, lock: lf, next: map[string]statEntry{}}
	if err := writeSmallFile(filepath.Join(dir, "repo"), []byte(repo+"\n")); err != nil {
		rs.close()
		return nil, err
	}
	return rs, nil
}

// lockStore takes the lock of a repository's part of the store. A lock file that
// was removed (with its directory, by a save that failed on an empty store) while
// this process waited for it is not the lock any more: it is taken again.
func lockStore(dir string, how int) (*os.File, error) {
	path := filepath.Join(dir, "lock")
	deadline := time.Now().Add(lockWait)
	for {
		flags := os.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
		if how == unix.LOCK_EX {
			flags |= os.O_CREATE
		}
		lf, err := os.OpenFile(path, flags, 0o600)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", path, unwrapPath(err))
		}
		for {
			err = unix.Flock(int(lf.Fd()), how|unix.LOCK_NB)
			if err == nil || !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			lf.Close()
			return nil, fmt.Errorf("lock %s: %w (another agentbox is saving or pruning this repository's snapshots)", path, err)
		}
		var held, now unix.Stat_t
		if unix.Fstat(int(lf.Fd()), &held) == nil && unix.Lstat(path, &now) == nil && held.Ino == now.Ino && held.Dev == now.Dev {
			return lf, nil
		}
		lf.Close()
		if how != unix.LOCK_EX || time.Now().After(deadline) {
			return nil, fmt.Errorf("lock %s: removed while waited for", path)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("create %s: %w", dir, err)
		}
	}
}

// dropIfEmpty removes the repository's part of the store when it holds no record:
// a first save that failed leaves nothing behind.
func (rs *repoStore) dropIfEmpty() {
	if recs, err := rs.records(); err == nil && len(recs) == 0 {
		os.RemoveAll(rs.dir)
	}
}

func (rs *repoStore) close() {
	if rs.lock != nil {
		rs.lock.Close() // drops the flock
		rs.lock = nil
	}
}

// writeSmallFile replaces path with b through a temporary file and a rename.
func writeSmallFile(path string, b []byte) error {
	if old, err := readBounded(path, int64(len(b))+1); err == nil && bytes.Equal(old, b) {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// readSmall reads a regular file of at most max bytes (no symlink, no FIFO).
func readBounded(path string, max int64) ([]byte, error) {
	f, err := safepath.OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, max)
	}
	return b, nil
}

// maxStatCache bounds the stat cache read back (about 150 bytes an entry).
const maxStatCache = 1 << 30

// loadCache reads the stat cache; a missing or damaged cache is an empty one (every
// file is read again, which is slow and correct).
func (rs *repoStore) loadCache() {
	rs.cache = map[string]statEntry{}
	f, err := safepath.OpenRegular(filepath.Join(rs.dir, "stat-cache"))
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, maxStatCache))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if name, e, ok := parseCacheLine(sc.Text()); ok {
			rs.cache[name] = e
		}
	}
}

// cutFields splits a line of the store's own files into len(f) space-separated
// fields and the strconv.Quote'd name after them (the stat cache, the unchanged
// listing).
func cutFields(line string, f []string) (name string, ok bool) {
	rest := line
	for i := range f {
		if f[i], rest, ok = strings.Cut(rest, " "); !ok {
			return "", false
		}
	}
	name, err := strconv.Unquote(rest)
	return name, err == nil
}

// parseCacheLine reads "DEV INO SIZE MTIME CTIME BLOB QUOTED-NAME".
func parseCacheLine(line string) (string, statEntry, bool) {
	var e statEntry
	var f [6]string
	name, ok := cutFields(line, f[:])
	if !ok {
		return "", e, false
	}
	var err [5]error
	e.key.dev, err[0] = strconv.ParseUint(f[0], 10, 64)
	e.key.ino, err[1] = strconv.ParseUint(f[1], 10, 64)
	e.key.size, err[2] = strconv.ParseInt(f[2], 10, 64)
	e.key.mtime, err[3] = strconv.ParseInt(f[3], 10, 64)
	e.key.ctime, err[4] = strconv.ParseInt(f[4], 10, 64)
	e.blob = f[5]
	for _, x := range err {
		if x != nil {
			return "", e, false
		}
	}
	if !isBlobName(e.blob) {
		return "", e, false
	}
	return name, e, true
}

// saveCache writes this save's stat cache when it differs from the one loaded.
func (rs *repoStore) saveCache() error {
	if !rs.dirty && len(rs.next) == len(rs.cache) {
		return nil
	}
	names := make([]string, 0, len(rs.next))
	for n := range rs.next {
		names = append(names, n)
	}
	sort.Strings(names)
	var b bytes.Buffer
	for _, n := range names {
		e := rs.next[n]
		fmt.Fprintf(&b, "%d %d %d %d %d %s %s\n", e.key.dev, e.key.ino, e.key.size, e.key.mtime, e.key.ctime, e.blob, strconv.Quote(n))
	}
	// Not synced: a cache torn by a crash loses its last lines, which parse as
	// nothing (see loadCache), and those files are read again.
	return writeFileNoSync(filepath.Join(rs.dir, "stat-cache"), b.Bytes())
}

// writeFileNoSync replaces path with b through a temporary file and a rename.
func writeFileNoSync(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
