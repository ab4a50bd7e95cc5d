package snapshot

// The content-addressed snapshot store (DESIGN.md P8, P13). A launch used to copy
// all of .git into a fresh ZIP; the packs that make up nearly all of it are
// immutable and identical launch after launch. The store keeps every file's content
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
	"encoding/json"
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
	"github.com/agentbox/agentbox/policy"
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

func isBlobName(s string) bool { return len(s) == 64 && isHex(s) }

func (rs *repoStore) blobPath(h string) string {
	return filepath.Join(rs.dir, "blobs", h[:2], h[2:])
}

// haveBlob reports whether the blob h is in the store with size bytes (-1: any).
func (rs *repoStore) haveBlob(h string, size int64) bool {
	var st unix.Stat_t
	if err := unix.Fstatat(unix.AT_FDCWD, rs.blobPath(h), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFREG && (size < 0 || st.Size == size)
}

// putBytes stores b (a tree) and returns its name.
func (rs *repoStore) putBytes(b []byte) (string, error) {
	sum := sha256.Sum256(b)
	h := hex.EncodeToString(sum[:])
	if rs.haveBlob(h, int64(len(b))) {
		return h, nil
	}
	rs.treeBytes += int64(len(b))
	return h, rs.publishBlob(h, func(w io.Writer) error { _, err := w.Write(b); return err })
}

// publishBlob writes a blob through a temporary file; fill writes its content. A
// blob that appeared meanwhile (same name: same content) is kept.
func (rs *repoStore) publishBlob(h string, fill func(io.Writer) error) error {
	sub := filepath.Join(rs.dir, "blobs", h[:2])
	if err := os.Mkdir(sub, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create %s: %w", sub, err)
	}
	tmp, err := os.CreateTemp(sub, ".tmp-*")
	if err != nil {
		return fmt.Errorf("store a blob in %s: %w", sub, err)
	}
	err = fill(tmp)
	if err == nil {
		err = tmp.Chmod(0o400)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp.Name(), rs.blobPath(h))
		if errors.Is(err, fs.ErrExist) {
			err = nil
		} else if err == nil {
			rs.written = append(rs.written, rs.blobPath(h))
		}
	}
	os.Remove(tmp.Name())
	if err != nil {
		return fmt.Errorf("store a blob in %s: %w", sub, err)
	}
	return nil
}

// hashWriter copies into the temporary blob while hashing.
type hashWriter struct {
	w io.Writer
	h interface {
		io.Writer
		Sum([]byte) []byte
	}
	p *progress
}

func (hw *hashWriter) Write(p []byte) (int, error) {
	hw.h.Write(p)
	hw.p.add(int64(len(p)))
	return hw.w.Write(p)
}

// putFile stores the content of the open regular file f (size bytes) and returns its
// blob. The content is read once: hashed while copied to a temporary blob, which is
// then given its name.
func (rs *repoStore) putFile(f *os.File, src string, size int64, buf []byte) (string, error) {
	sub := filepath.Join(rs.dir, "blobs")
	tmp, err := os.CreateTemp(sub, ".tmp-*")
	if err != nil {
		return "", fmt.Errorf("store %s: %w", src, err)
	}
	defer os.Remove(tmp.Name())
	hw := &hashWriter{w: &writeback{f: tmp}, h: sha256.New(), p: rs.progress}
	n, err := io.CopyBuffer(hw, io.LimitReader(f, size), buf)
	if err != nil {
		tmp.Close()
		return "", fmt.Errorf("copy %s: %w", src, err)
	}
	if n != size {
		// Shrunk while read: store what was read (the stat cache will not match
		// it next time).
		size = n
	}
	if err := tmp.Chmod(0o400); err != nil {
		tmp.Close()
		return "", fmt.Errorf("store %s: %w", src, err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("store %s: %w", src, err)
	}
	h := hex.EncodeToString(hw.h.Sum(nil))
	if rs.haveBlob(h, size) {
		return h, nil
	}
	if err := os.Mkdir(filepath.Join(sub, h[:2]), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("store %s: %w", src, err)
	}
	// A blob of this name that is not what its name says (haveBlob checked the
	// size) is replaced: the temporary file's content was hashed on the way in.
	_, lerr := os.Lstat(rs.blobPath(h))
	if err := os.Rename(tmp.Name(), rs.blobPath(h)); err != nil {
		return "", fmt.Errorf("store %s: %w", src, err)
	}
	if lerr != nil {
		rs.written = append(rs.written, rs.blobPath(h))
	}
	rs.newBytes += size
	return h, nil
}

// walker saves a directory tree into the store.
type walker struct {
	rs  *repoStore
	buf []byte
}

// saveTree stores the directory src (key prefix pfx in the stat cache) and returns
// its tree.
func (w *walker) saveTree(src, pfx string) (h string, mode uint32, mtime int64, err error) {
	fd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", 0, 0, fmt.Errorf("open %s: %w", src, err)
	}
	d := os.NewFile(uintptr(fd), src)
	defer d.Close()
	h, self, err := w.dir(d, src, pfx, 0)
	return h, self.Mode & 0o777, self.Mtim.Nano(), err
}

// dir stores the open directory d and returns its tree and its own entry fields.
func (w *walker) dir(d *os.File, src, pfx string, depth int) (string, unix.Stat_t, error) {
	var self unix.Stat_t
	if depth > maxTreeDepth {
		return "", self, fmt.Errorf("%s: directories nested deeper than %d", src, maxTreeDepth)
	}
	if err := unix.Fstat(int(d.Fd()), &self); err != nil {
		return "", self, fmt.Errorf("stat %s: %w", src, err)
	}
	w.rs.listing.add(src, &self) // before its names are read
	if err := w.rs.budget.take(src, 0); err != nil {
		return "", self, err
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return "", self, fmt.Errorf("read directory %s: %w", src, err)
	}
	sort.Strings(names)
	dirfd := int(d.Fd())
	var tree bytes.Buffer
	for _, name := range names {
		e, ok, err := w.entry(dirfd, name, filepath.Join(src, name), pfx+name, depth)
		if err != nil {
			return "", self, err
		}
		if ok {
			tree.WriteString(e.line())
		}
	}
	h, err := w.rs.putBytes(tree.Bytes())
	return h, self, err
}

// entry stores one directory entry; ok is false when it is skipped.
func (w *walker) entry(dirfd int, name, src, key string, depth int) (treeEntry, bool, error) {
	if b := w.rs.budget; b.entries >= b.maxEntries {
		// Beyond the entry bound the rest is left out, counted and named once, and
		// the save goes on (as beyond the byte bound): failing it would let a session
		// that filled .git with entries stop every later launch. Nothing more is
		// opened or stat'ed, so the cost stops growing with what was planted.
		if w.rs.overEntries == 0 {
			w.rs.firstOver = src
			w.rs.listing.spoil()
		}
		w.rs.overEntries++
		return treeEntry{}, false, nil
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			w.rs.listing.spoil()
			return treeEntry{}, false, nil // removed since readdir
		}
		return treeEntry{}, false, fmt.Errorf("stat %s: %w", src, err)
	}
	e := treeEntry{mode: st.Mode & 0o777, mtime: st.Mtim.Nano(), name: name}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOENT) {
			w.rs.listing.spoil()
			return treeEntry{}, false, nil // changed type since the stat: the next save sees it
		}
		if err != nil {
			return treeEntry{}, false, fmt.Errorf("open %s: %w", src, err)
		}
		d := os.NewFile(uintptr(fd), src)
		defer d.Close()
		h, self, err := w.dir(d, src, key+"/", depth+1)
		if err != nil {
			return treeEntry{}, false, err
		}
		e.kind, e.ref, e.mode, e.mtime = 'd', h, self.Mode&0o777, self.Mtim.Nano()
		return e, true, nil
	case unix.S_IFLNK:
		buf := make([]byte, maxSymlinkTarget+1)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return treeEntry{}, false, fmt.Errorf("read link %s: %w", src, err)
		}
		if err := w.rs.budget.take(src, int64(n)); err != nil {
			return treeEntry{}, false, err
		}
		if n > maxSymlinkTarget {
			w.rs.skip(src, "symlink target longer than 4096 bytes")
			return treeEntry{}, false, nil
		}
		e.kind, e.ref, e.mode, e.size = 'l', string(buf[:n]), 0o777, int64(n)
		w.rs.listing.add(src, &st)
		return e, true, nil
	case unix.S_IFREG:
		h, size, ok, err := w.file(dirfd, name, src, key, &st)
		if err != nil || !ok {
			return treeEntry{}, false, err
		}
		e.kind, e.ref, e.size = 'f', h, size
		return e, true, nil
	}
	// Sockets (the fsmonitor daemon's), FIFOs and devices hold no repository data:
	// never opened, and named (but for Git's own fsmonitor socket).
	w.rs.skipSpecial(src, st.Mode&unix.S_IFMT)
	return treeEntry{}, false, nil
}

// skipSpecial names an entry that is not a regular file, a directory or a symlink,
// at most maxSkipLines of them one by one.
func (rs *repoStore) skipSpecial(src string, mode uint32) {
	what := "not a regular file"
	switch mode {
	case unix.S_IFIFO:
		what = "a FIFO"
	case unix.S_IFSOCK:
		if filepath.Base(src) == "fsmonitor--daemon.ipc" {
			return // Git's own fsmonitor daemon listens there: nothing to say
		}
		what = "a socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		what = "a device"
	}
	switch n := rs.specials; {
	case n < maxSkipLines:
		rs.skipped = append(rs.skipped, fmt.Sprintf("%s: %s, not archived", quoteControl(src), what))
	case n == maxSkipLines:
		rs.skipped = append(rs.skipped, "… and more entries that are not regular files, not archived")
	}
	rs.specials++
}

// racyWindow: a file whose ctime is this close to the save is not put in the stat
// cache, since a write in the same clock tick would leave its stat unchanged.
var racyWindow = time.Second

// settled reports whether an entry's ctime is far enough before the save that
// started at start for the ctime to vouch for it (the stat cache, the listing).
func settled(ctime int64, start time.Time) bool {
	return time.Unix(0, ctime).Before(start.Add(-racyWindow))
}

// sparseSlack is how much of a file's size may be missing from its disk blocks
// before it counts as sparse (a file's last block, filesystems that compress).
const sparseSlack = 1 << 20

// file stores one regular file, or reuses its blob when the stat cache vouches for
// it.
func (w *walker) file(dirfd int, name, src, key string, st *unix.Stat_t) (h string, size int64, ok bool, err error) {
	rs := w.rs
	k := statKey{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
	if err := rs.budget.take(src, 0); err != nil {
		return "", 0, false, err
	}
	rs.total += st.Size
	if c, hit := rs.cache[key]; hit && c.key == k && rs.haveBlob(c.blob, k.size) {
		rs.next[key] = c
		rs.listing.add(src, st)
		return c.blob, k.size, true, nil
	}
	// Git never writes a sparse file: one is planted, and reading its holes would
	// cost the launch what it does not cost on disk.
	if st.Blocks*512+sparseSlack < st.Size {
		rs.skip(src, fmt.Sprintf("sparse file (%s, %s on disk): not a file Git writes", formatBytes(st.Size), formatBytes(st.Blocks*512)))
		return "", 0, false, nil
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOENT) {
		rs.listing.spoil()
		return "", 0, false, nil // changed since the stat: the next save sees it
	}
	if err != nil {
		return "", 0, false, fmt.Errorf("open %s: %w", src, err)
	}
	f := os.NewFile(uintptr(fd), src)
	defer f.Close()
	var fst unix.Stat_t
	if err := unix.Fstat(fd, &fst); err != nil {
		return "", 0, false, fmt.Errorf("stat %s: %w", src, err)
	}
	if fst.Mode&unix.S_IFMT != unix.S_IFREG {
		rs.listing.spoil()
		return "", 0, false, nil // became a FIFO or device since the stat
	}
	if err := rs.budget.addBytes(src, fst.Size); err != nil {
		// Over the byte bound: this file is left out and named, and the save goes
		// on. Failing the save instead would let a session that wrote a large file
		// into .git stop every later launch (a bound that is hit must never do that).
		rs.budget.bytes -= fst.Size
		rs.skip(src, fmt.Sprintf("%s of new content would pass the snapshot's bound of %s: not saved; raise --git-save-max-size to keep it", formatBytes(fst.Size), formatBytes(rs.budget.maxBytes)))
		return "", 0, false, nil
	}
	if w.buf == nil {
		w.buf = make([]byte, copyBufSize)
	}
	h, err = rs.putFile(f, src, fst.Size, w.buf)
	if err != nil {
		return "", 0, false, err
	}
	k = statKey{dev: fst.Dev, ino: fst.Ino, size: fst.Size, mtime: fst.Mtim.Nano(), ctime: fst.Ctim.Nano()}
	rs.listing.add(src, &fst)
	if settled(k.ctime, rs.start) {
		rs.next[key] = statEntry{key: k, blob: h}
	}
	rs.dirty = true
	return h, fst.Size, true, nil
}

func (rs *repoStore) skip(src, why string) {
	rs.listing.spoil()
	if len(rs.skipped) < 1000 {
		rs.skipped = append(rs.skipped, src+": "+why)
	}
}

// progress reports the bytes stored so far on a terminal, at most every 200 ms and
// only once a save has stored 64 MiB.
type progress struct {
	w     io.Writer
	what  string
	n     int64
	shown time.Time
	any   bool
}

func (p *progress) add(n int64) {
	if p == nil || p.w == nil {
		return
	}
	p.n += n
	if p.n < 64<<20 || time.Since(p.shown) < 200*time.Millisecond {
		return
	}
	p.shown, p.any = time.Now(), true
	fmt.Fprintf(p.w, "\ragentbox: %s: %s stored\033[K", p.what, formatBytes(p.n))
}

func (p *progress) done() {
	if p != nil && p.any {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

// SaveStored saves the Git metadata of opts.Repo into the store at opts.Dir (which
// must be absolute) and applies retention (opts.Keep snapshots, opts.KeepBytes of
// distinct content). It returns nil and no error when opts.Repo is not a Git work
// tree. A failed save removes the blobs it wrote and leaves no record.
func SaveStored(opts SnapshotOptions) (s *Snapshot, err error) {
	l, ok, err := locateGit(opts.Repo)
	if err != nil {
		return nil, fmt.Errorf("save Git metadata of %s: %w", opts.Repo, err)
	}
	if !ok {
		return nil, nil
	}
	store := opts.Dir
	if !filepath.IsAbs(store) {
		return nil, fmt.Errorf("snapshot store %q: not an absolute path", store)
	}
	for _, inside := range []string{opts.Repo, l.gitDir, l.commonDir} {
		if policy.Within(store, inside) {
			return nil, fmt.Errorf("snapshot directory %s lies inside %s: snapshots there could be changed from the sandbox or would be saved again in each snapshot", store, inside)
		}
	}
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	now = now.Round(0)
	rs, err := openRepoStore(store, opts.Repo)
	if err != nil {
		return nil, fmt.Errorf("save Git metadata to %s: %w", store, err)
	}
	defer rs.close()
	rs.budget, rs.start = newBudget(opts), time.Now()
	if path, rec, ok := rs.unchangedRecord(l, opts.Version); ok {
		return &Snapshot{Path: path, Manifest: rec.Manifest, Skipped: rec.Skipped, Unchanged: true}, nil
	}
	rs.listing = newListing(rs.start)
	rs.progress = &progress{w: opts.Progress, what: "saving the Git metadata of " + opts.Repo}
	defer rs.progress.done()
	defer func() {
		if err != nil {
			for _, p := range rs.written {
				os.Remove(p)
			}
			rs.dropIfEmpty()
		}
	}()
	rs.loadCache()
	head, commit := resolveHead(l.gitDir, l.commonDir)
	rec := Record{StoreFormat: StoreFormat, Manifest: Manifest{
		Format: ManifestFormat, Repo: opts.Repo, GitCommonDir: l.commonDir, GitDir: l.gitDir,
		DotGitFile: l.dotGit, Head: head, HeadCommit: commit, Time: now, AgentboxVersion: opts.Version,
	}}
	// The copy buffer is made when a file is read: a save of unchanged metadata
	// reads none, and a megabyte of fresh heap costs it page faults and clearing.
	w := &walker{rs: rs}
	if rec.Common, rec.CommonMode, rec.CommonMtime, err = w.saveTree(l.commonDir, "c/"); err != nil {
		return nil, fmt.Errorf("save Git metadata to %s: %w", store, err)
	}
	if l.gitDir != l.commonDir {
		if rec.Worktree, rec.WorktreeMode, rec.WorktreeMtime, err = w.saveTree(l.gitDir, "w/"); err != nil {
			return nil, fmt.Errorf("save Git metadata to %s: %w", store, err)
		}
	}
	if l.dotGit != "" {
		if rec.DotGit, rec.DotGitMode, err = w.pointer(l.dotGit); err != nil {
			return nil, fmt.Errorf("save Git metadata to %s: %w", store, err)
		}
	}
	if rs.overEntries > 0 {
		rs.skipped = append(rs.skipped, fmt.Sprintf("%s: this and %d more entries beyond the snapshot's bound of %d entries were not saved (Git's metadata never holds that many: look at what a session left in .git)",
			rs.firstOver, rs.overEntries-1, rs.budget.maxEntries))
	}
	rec.Bytes, rec.NewBytes, rec.Entries, rec.Skipped = rs.total, rs.newBytes, rs.budget.entries, rs.skipped
	if err := rs.sync(); err != nil {
		return nil, fmt.Errorf("save Git metadata to %s: %w", store, err)
	}
	path, err := rs.publishRecord(&rec, now, len(rs.written) > 0)
	if err != nil {
		return nil, fmt.Errorf("save Git metadata to %s: %w", store, err)
	}
	rs.written = nil // the record holds them now
	rs.saveListing(rs.listing, l, opts.Version, path)
	rs.addUsage(rs.newBytes + rs.treeBytes)
	s = &Snapshot{Path: path, Manifest: rec.Manifest, Skipped: rec.Skipped, NewBytes: rec.NewBytes}
	if err := rs.saveCache(); err != nil {
		s.PruneErr = err
	}
	if opts.Keep > 0 || opts.KeepBytes > 0 {
		var perr error
		s.Pruned, perr = rs.prune(path, opts.Keep, opts.KeepBytes)
		s.PruneErr = errors.Join(s.PruneErr, perr)
	}
	return s, nil
}

// pointer stores the work tree's ".git" pointer file.
func (w *walker) pointer(src string) (string, uint32, error) {
	dir, err := unix.Open(filepath.Dir(src), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", 0, fmt.Errorf("open %s: %w", filepath.Dir(src), err)
	}
	defer unix.Close(dir)
	var st unix.Stat_t
	if err := unix.Fstatat(dir, ".git", &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return "", 0, fmt.Errorf("stat %s: %w", src, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", 0, fmt.Errorf("%s: not a regular file", src)
	}
	h, _, ok, err := w.file(dir, ".git", src, "p", &st)
	if err == nil && !ok {
		err = fmt.Errorf("%s: changed while saved", src)
	}
	return h, st.Mode & 0o777, err
}

// manyBlobs is where one syncfs(2) becomes cheaper than an fsync per new blob.
const manyBlobs = 64

// sync makes the new blobs durable before the record that names them is written.
func (rs *repoStore) sync() error {
	if len(rs.written) > manyBlobs {
		if err := unix.Syncfs(int(rs.lock.Fd())); err != nil {
			return fmt.Errorf("sync: %w", err)
		}
		return nil
	}
	for _, p := range rs.written {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return fmt.Errorf("sync %s: %w", p, err)
		}
	}
	for _, p := range rs.written {
		syncDir(filepath.Dir(p))
	}
	return nil
}

// publishRecord writes the record as snaps/STAMP.snap, never replacing one. It is
// synced only when the save stored new blobs: a record of unchanged metadata names
// trees an older record names too, and a torn record fails its checks by name
// (restore, prune), so a crash loses at most that record, never silently.
func (rs *repoStore) publishRecord(rec *Record, now time.Time, durable bool) (string, error) {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return "", err
	}
	b = append(b, '\n')
	snaps := filepath.Join(rs.dir, "snaps")
	tmp, err := os.CreateTemp(snaps, ".tmp-*")
	if err != nil {
		return "", fmt.Errorf("cannot create a file in %s: %w", snaps, unwrapPath(err))
	}
	_, err = tmp.Write(b)
	if err == nil && durable {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("write a record in %s: %w", snaps, err)
	}
	stem := now.UTC().Format("20060102-150405.000000000")
	path, err := publishAs(tmp.Name(), snaps, stem, RecordSuffix)
	if err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	if durable {
		syncDir(snaps)
	}
	return path, nil
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// records lists the records of the repository, oldest first.
func (rs *repoStore) records() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(rs.dir, "snaps"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), RecordSuffix) && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, filepath.Join(rs.dir, "snaps", e.Name()))
		}
	}
	sort.Strings(out)
	return out, nil
}

// Retention is lazy about collecting blobs. A record beyond --git-save-keep is moved
// to snaps/dropped/ at once (one rename: it is no longer a snapshot), but the blobs
// that only dropped records use are collected, with a walk of every kept record,
// once collectEvery records are waiting or when the store may be over its byte
// budget. The usage file holds an upper bound of the blobs' bytes (what saves wrote
// since the last collection counted in full), so that a store within its budget is
// not walked to learn so.
var collectEvery = 8

const (
	droppedDir = "dropped"
	usageFile  = "usage"
)

func (rs *repoStore) readUsage() (int64, bool) {
	b, err := readBounded(filepath.Join(rs.dir, usageFile), 32)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil && n >= 0
}

func (rs *repoStore) writeUsage(n int64) {
	_ = writeFileNoSync(filepath.Join(rs.dir, usageFile), []byte(strconv.FormatInt(n, 10)+"\n"))
}

// addUsage counts what this save wrote; an unknown usage stays unknown.
func (rs *repoStore) addUsage(n int64) {
	if n == 0 {
		return
	}
	if u, ok := rs.readUsage(); ok {
		rs.writeUsage(u + n)
	}
}

// droppedRecords lists the records waiting for their blobs to be collected.
func (rs *repoStore) droppedRecords() []string {
	ents, err := os.ReadDir(filepath.Join(rs.dir, "snaps", droppedDir))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), RecordSuffix) {
			out = append(out, filepath.Join(rs.dir, "snaps", droppedDir, e.Name()))
		}
	}
	return out
}

// prune applies retention after the save of self: the oldest records beyond keep
// go, and then the oldest whose content would take the distinct bytes of the kept
// ones beyond keepBytes; self is always kept. It returns the records removed.
func (rs *repoStore) prune(self string, keep int, keepBytes int64) ([]string, error) {
	recs, err := rs.records()
	if err != nil {
		return nil, fmt.Errorf("prune old snapshots: %w", err)
	}
	usage, known := rs.readUsage()
	if keepBytes > 0 && (!known || usage > keepBytes) {
		return rs.collect(self, recs, keep, keepBytes)
	}
	var pruned []string
	if keep > 0 && len(recs) > keep {
		dd := filepath.Join(rs.dir, "snaps", droppedDir)
		if err := os.Mkdir(dd, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("prune old snapshots: %w", err)
		}
		for _, p := range recs[:len(recs)-keep] {
			if p == self {
				continue
			}
			if err := os.Rename(p, filepath.Join(dd, filepath.Base(p))); err != nil {
				return pruned, fmt.Errorf("prune old snapshots: %w", err)
			}
			pruned = append(pruned, p)
		}
	}
	if len(rs.droppedRecords()) < collectEvery {
		return pruned, nil
	}
	recs, err = rs.records()
	if err != nil {
		return pruned, fmt.Errorf("prune old snapshots: %w", err)
	}
	more, err := rs.collect(self, recs, keep, keepBytes)
	return append(pruned, more...), err
}

// collect walks every record, keeps the newest ones within keep and keepBytes,
// removes the others and the dropped ones, and the blobs only those used; it
// records the kept ones' distinct bytes as the usage.
func (rs *repoStore) collect(self string, recs []string, keep int, keepBytes int64) ([]string, error) {
	r := newReach(rs)
	var kept, dropped []string
	var errs []error
	unsure := false
	var bytes int64
	// Newest first: self, then the others.
	order := []string{self}
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i] != self {
			order = append(order, recs[i])
		}
	}
	for i, p := range order {
		if i > 0 && keep > 0 && len(kept) >= keep {
			dropped = append(dropped, p)
			continue
		}
		added, err := r.addRecord(p, true)
		if err != nil {
			// A record that cannot be read is kept, and no blob is collected
			// this time: what it names is not known.
			errs = append(errs, err)
			unsure = true
		}
		if i > 0 && keepBytes > 0 && bytes+added > keepBytes {
			r.unmark() // its blobs are not kept by it
			dropped = append(dropped, p)
			keep = len(kept) // and every older one goes too
			continue
		}
		bytes += added
		r.commit()
		kept = append(kept, p)
	}
	waiting := rs.droppedRecords()
	var pruned []string
	for _, p := range append(dropped, waiting...) {
		// Collect before removing: a record that is gone cannot be read.
		if _, err := r.addRecord(p, false); err != nil {
			errs = append(errs, err)
		}
		if err := os.Remove(p); err != nil {
			errs = append(errs, err)
			continue
		}
		if filepath.Base(filepath.Dir(p)) != droppedDir {
			pruned = append(pruned, p)
		}
	}
	if unsure {
		return pruned, fmt.Errorf("prune old snapshots: %w", errors.Join(errs...))
	}
	for _, h := range r.garbage() {
		if err := os.Remove(rs.blobPath(h)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return pruned, fmt.Errorf("prune old snapshots: %w", errors.Join(errs...))
	}
	rs.writeUsage(bytes)
	return pruned, nil
}

// reach computes which blobs kept records use, and which only dropped ones do.
type reach struct {
	rs      *repoStore
	kept    map[string]bool // blobs of kept records
	pending map[string]bool // blobs first seen in the record being added
	other   map[string]bool // blobs of dropped records
}

func newReach(rs *repoStore) *reach {
	return &reach{rs: rs, kept: map[string]bool{}, pending: map[string]bool{}, other: map[string]bool{}}
}

// addRecord marks the blobs of the record at p, as kept (returning the bytes of the
// blobs no kept record had) or as dropped.
func (r *reach) addRecord(p string, keep bool) (int64, error) {
	rec, err := readRecord(p)
	if err != nil {
		return 0, err
	}
	var added int64
	mark := func(h string, size int64) bool {
		if keep {
			if r.kept[h] || r.pending[h] {
				return false
			}
			r.pending[h] = true
			added += size
			return true
		}
		if r.other[h] || r.kept[h] {
			return false
		}
		r.other[h] = true
		return true
	}
	var walk func(tree string) error
	walk = func(tree string) error {
		b, err := r.rs.readBlob(tree, maxTree)
		if err != nil {
			return err
		}
		if !mark(tree, int64(len(b))) {
			return nil // seen: its subtrees too
		}
		ents, err := parseTree(b)
		if err != nil {
			return fmt.Errorf("tree %s: %w", tree, err)
		}
		for _, e := range ents {
			switch e.kind {
			case 'f':
				mark(e.ref, e.size)
			case 'd':
				if err := walk(e.ref); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for _, t := range []string{rec.Common, rec.Worktree} {
		if t != "" {
			if err := walk(t); err != nil {
				return added, fmt.Errorf("%s: %w", p, err)
			}
		}
	}
	if rec.DotGit != "" {
		mark(rec.DotGit, 0)
	}
	return added, nil
}

func (r *reach) commit() {
	for h := range r.pending {
		r.kept[h] = true
	}
	clear(r.pending)
}

func (r *reach) unmark() { clear(r.pending) }

// garbage is the blobs of dropped records that no kept record uses.
func (r *reach) garbage() []string {
	var out []string
	for h := range r.other {
		if !r.kept[h] {
			out = append(out, h)
		}
	}
	sort.Strings(out)
	return out
}

// maxTree bounds a tree blob read back: a directory of a million loose objects is
// about 150 MB.
const maxTree = 512 << 20

// maxRecord bounds a record read back.
const maxRecord = 1 << 20

func readRecord(p string) (*Record, error) {
	b, err := readBounded(p, maxRecord)
	if err != nil {
		return nil, err
	}
	var rec Record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if rec.StoreFormat != StoreFormat {
		return nil, fmt.Errorf("%s: store format %d, this agentbox reads %d", p, rec.StoreFormat, StoreFormat)
	}
	if err := rec.Manifest.validate(); err != nil {
		return nil, fmt.Errorf("%s: manifest: %w", p, err)
	}
	for _, h := range []string{rec.Common, rec.Worktree, rec.DotGit} {
		if h != "" && !isBlobName(h) {
			return nil, fmt.Errorf("%s: %q is not a blob name", p, h)
		}
	}
	if rec.Common == "" {
		return nil, fmt.Errorf("%s: no tree of the common dir", p)
	}
	return &rec, nil
}

// readBlob reads a blob of at most max bytes and checks it against its name.
func (rs *repoStore) readBlob(h string, max int64) ([]byte, error) {
	b, err := readBounded(rs.blobPath(h), max)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("blob %s is missing from the store", h)
	}
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", h, err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != h {
		return nil, fmt.Errorf("blob %s: content changed (its SHA-256 is %x)", h, sum)
	}
	return b, nil
}

// parseTree reads a tree blob; any line it cannot read is an error.
func parseTree(b []byte) ([]treeEntry, error) {
	var out []treeEntry
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return nil, errors.New("unterminated line")
		}
		line := string(b[:i])
		b = b[i+1:]
		f := strings.SplitN(line, " ", 5)
		if len(f) != 5 || len(f[0]) != 1 {
			return nil, fmt.Errorf("bad line %q", line)
		}
		e := treeEntry{kind: f[0][0]}
		mode, err1 := strconv.ParseUint(f[1], 8, 32)
		mt, err2 := strconv.ParseInt(f[2], 10, 64)
		sz, err3 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || sz < 0 || mode > 0o777 {
			return nil, fmt.Errorf("bad line %q", line)
		}
		e.mode, e.mtime, e.size = uint32(mode), mt, sz
		rest := f[4]
		var ref string
		switch e.kind {
		case 'f', 'd':
			ref, rest, _ = strings.Cut(rest, " ")
			if !isBlobName(ref) {
				return nil, fmt.Errorf("bad reference in %q", line)
			}
		case 'l':
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return nil, fmt.Errorf("bad link target in %q", line)
			}
			ref, _ = strconv.Unquote(q)
			rest = strings.TrimPrefix(rest[len(q):], " ")
		default:
			return nil, fmt.Errorf("unknown kind in %q", line)
		}
		name, err := strconv.Unquote(rest)
		if err != nil {
			return nil, fmt.Errorf("bad name in %q", line)
		}
		e.ref, e.name = ref, name
		out = append(out, e)
	}
	return out, nil
}

// publishAs renames tmp to dir/stem+suffix (or stem-N+suffix) without replacing a
// file.
func publishAs(tmp, dir, stem, suffix string) (string, error) {
	for n := 1; n <= 1000; n++ {
		name := stem + suffix
		if n > 1 {
			name = stem + "-" + strconv.Itoa(n) + suffix
		}
		final := filepath.Join(dir, name)
		err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, final, unix.RENAME_NOREPLACE)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
			if err = os.Link(tmp, final); err == nil {
				err = os.Remove(tmp)
			}
		}
		switch {
		case errors.Is(err, fs.ErrExist):
			continue
		case err != nil:
			return "", fmt.Errorf("rename to %s: %w", final, err)
		}
		return final, nil
	}
	return "", fmt.Errorf("1000 snapshots named %s-N%s exist already in %s", stem, suffix, dir)
}
