package snapshot

import (
	"archive/zip"
	"bufio"
	"compress/flate"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// maxTreeDepth bounds the directory walk: gitdirs are shallow, and nested submodule
// gitdirs (modules/a/modules/b/…) stay far below this.
const maxTreeDepth = 64

// copyBufSize is the read size for file contents: large enough that a pack streams
// in few system calls, small enough that no file is held in memory.
const copyBufSize = 1 << 20

// archiver adds directory trees to a ZIP. It walks with directory file descriptors:
// every entry is opened relative to its parent's fd with O_NOFOLLOW, so a symlink
// anywhere inside the tree is stored as a symlink and never followed, and a renamed
// path component cannot send the walk elsewhere.
type archiver struct {
	zw     *zip.Writer
	buf    []byte
	budget *budget
}

func newArchiver(zw *zip.Writer, b *budget) *archiver {
	zw.RegisterCompressor(zip.Deflate, fastDeflate)
	return &archiver{zw: zw, buf: make([]byte, copyBufSize), budget: b}
}

// flatePool recycles deflate state (about 1 MiB each) across the archive's entries.
var flatePool sync.Pool

// fastDeflate compresses with flate.BestSpeed: what is deflated is refs, logs, the
// index and hooks, where level 1 gives most of the saving at several times the speed.
func fastDeflate(w io.Writer) (io.WriteCloser, error) {
	if fw, ok := flatePool.Get().(*flate.Writer); ok {
		fw.Reset(w)
		return &pooledFlate{fw}, nil
	}
	fw, err := flate.NewWriter(w, flate.BestSpeed)
	if err != nil {
		return nil, err
	}
	return &pooledFlate{fw}, nil
}

type pooledFlate struct{ *flate.Writer }

func (p *pooledFlate) Close() error {
	err := p.Writer.Close()
	flatePool.Put(p.Writer)
	return err
}

// writeArchive writes manifest.json, then the common dir, the worktree gitdir and
// the pointer file.
func writeArchive(f *os.File, m *Manifest, l layout, b *budget) error {
	out := bufio.NewWriterSize(&writeback{f: f}, copyBufSize)
	zw := zip.NewWriter(out)
	if err := writeManifestEntry(zw, m); err != nil {
		return err
	}
	a := newArchiver(zw, b)
	if err := a.addTree(l.commonDir, CommonPrefix); err != nil {
		return err
	}
	if l.gitDir != l.commonDir {
		if err := a.addTree(l.gitDir, WorktreePrefix); err != nil {
			return err
		}
	}
	if l.dotGit != "" {
		if err := a.addPointer(l.dotGit, DotGitName); err != nil {
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("finish ZIP: %w", err)
	}
	if err := out.Flush(); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

// writebackChunk is how much is written before the kernel is asked to start writing
// it out.
const writebackChunk = 16 << 20

// writeback writes to f and starts the kernel's writeback of every 16 MiB as soon as
// it is written (sync_file_range, which does not wait), so that the final fsync waits
// for the last chunk rather than the whole archive, and dirty pages do not pile up.
type writeback struct {
	f            *os.File
	off, started int64
}

func (w *writeback) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.off += int64(n)
	if w.off-w.started >= writebackChunk {
		// Advisory: an I/O error here shows again in the fsync that follows.
		_ = unix.SyncFileRange(int(w.f.Fd()), w.started, w.off-w.started, unix.SYNC_FILE_RANGE_WRITE)
		w.started = w.off
	}
	return n, err
}

// publish gives the complete temporary file its snapshot name without ever replacing
// an existing file: renameat2(RENAME_NOREPLACE) — or, on filesystems without it,
// link(2) — fails when the name is taken, and the next "-N" is tried.
func publish(tmp, dir, stem string) (string, error) {
	return publishAs(tmp, dir, stem, ".zip")
}

// addTree stores the directory src under prefix (which ends in "/").
func (a *archiver) addTree(src, prefix string) error {
	fd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", src, err)
	}
	d := os.NewFile(uintptr(fd), src)
	defer d.Close()
	return a.addDir(d, src, prefix, 0)
}

// addDir stores the open directory d (host path src) as the entry name and then its
// children, in name order.
func (a *archiver) addDir(d *os.File, src, name string, depth int) error {
	if depth > maxTreeDepth {
		return fmt.Errorf("%s: directories nested deeper than %d", src, maxTreeDepth)
	}
	fi, err := d.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", src, err)
	}
	if err := a.budget.take(src, 0); err != nil {
		return err
	}
	if err := a.header(name, fi.Mode(), fi.ModTime(), zip.Store); err != nil {
		return err
	}
	ents, err := d.ReadDir(-1)
	if err != nil {
		return fmt.Errorf("read directory %s: %w", src, err)
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	dirfd := int(d.Fd())
	for _, e := range ents {
		child, childName := filepath.Join(src, e.Name()), name+e.Name()
		switch e.Type() {
		case fs.ModeDir:
			err = a.openDir(dirfd, e.Name(), child, childName+"/", depth+1)
		case fs.ModeSymlink:
			err = a.addSymlink(dirfd, e.Name(), child, childName)
		case 0:
			err = a.addFile(dirfd, e.Name(), child, childName)
		default:
			// Sockets (the fsmonitor daemon's), FIFOs and devices hold no
			// repository data and cannot be archived: named, never opened.
			a.skip(child, e.Type())
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (a *archiver) openDir(dirfd int, base, src, name string, depth int) error {
	fd, err := unix.Openat(dirfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		return a.addEntryAgain(dirfd, base, src, name[:len(name)-1], depth)
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", src, err)
	}
	d := os.NewFile(uintptr(fd), src)
	defer d.Close()
	return a.addDir(d, src, name, depth)
}

// addEntryAgain handles an entry whose type changed between readdir and open: it is
// stored as whatever it is now.
func (a *archiver) addEntryAgain(dirfd int, base, src, name string, depth int) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("stat %s: %w", src, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return a.addSymlink(dirfd, base, src, name)
	case unix.S_IFREG:
		return a.addFile(dirfd, base, src, name)
	case unix.S_IFDIR:
		return a.openDir(dirfd, base, src, name+"/", depth)
	}
	return nil
}

// addFile streams one regular file into the archive.
func (a *archiver) addFile(dirfd int, base, src, name string) error {
	fd, err := unix.Openat(dirfd, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) {
		return a.addSymlink(dirfd, base, src, name)
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", src, err)
	}
	f := os.NewFile(uintptr(fd), src)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", src, err)
	}
	if !fi.Mode().IsRegular() {
		a.skip(src, fi.Mode().Type()) // became a FIFO or device since readdir
		return nil
	}
	if err := a.budget.take(src, fi.Size()); err != nil {
		return err
	}
	method := zip.Deflate
	if storeAsIs(name) {
		method = zip.Store
	}
	w, err := a.create(name, fi.Mode(), fi.ModTime(), method)
	if err != nil {
		return err
	}
	// Only the size counted: a file still growing is cut there. (LimitReader also
	// hides f's WriterTo, so that the copy uses a.buf instead of a fresh buffer.)
	if _, err := io.CopyBuffer(w, io.LimitReader(f, fi.Size()), a.buf); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return nil
}

// addSymlink stores a symlink as a symlink: mode bits in the external attributes and
// the target as content, as Info-ZIP does.
func (a *archiver) addSymlink(dirfd int, base, src, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("stat %s: %w", src, err)
	}
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dirfd, base, buf)
	if err != nil {
		return fmt.Errorf("read link %s: %w", src, err)
	}
	if err := a.budget.take(src, int64(n)); err != nil {
		return err
	}
	mtime := time.Unix(st.Mtim.Unix())
	w, err := a.create(name, fs.ModeSymlink|0o777, mtime, zip.Store)
	if err != nil {
		return err
	}
	if _, err := w.Write(buf[:n]); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// addPointer stores the work tree's ".git" pointer file.
func (a *archiver) addPointer(src, name string) error {
	dir, err := unix.Open(filepath.Dir(src), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", filepath.Dir(src), err)
	}
	defer unix.Close(dir)
	return a.addFile(dir, path.Base(src), src, name)
}

func (a *archiver) header(name string, mode fs.FileMode, mtime time.Time, method uint16) error {
	_, err := a.create(name, mode, mtime, method)
	return err
}

func (a *archiver) create(name string, mode fs.FileMode, mtime time.Time, method uint16) (io.Writer, error) {
	h := &zip.FileHeader{Name: name, Method: method, Modified: mtime}
	h.SetMode(mode)
	w, err := a.zw.CreateHeader(h)
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", name, err)
	}
	return w, nil
}
