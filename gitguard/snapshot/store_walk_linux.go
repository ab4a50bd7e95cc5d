package snapshot

// The walk that saves a gitdir into the store, entry by entry, and what it leaves out.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

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
