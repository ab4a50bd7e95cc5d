package shadow

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// indexEntry is one entry of the shadow index: a tracked path, its mode, its blob,
// and the inode (low 32 bits, as Git keeps it), size (likewise) and ctime (ns) it
// had when last staged.
type indexEntry struct {
	path  string
	mode  uint32
	ino   uint32
	size  uint32
	ctime int64
	oid   [20]byte
}

// readIndex reads the paths and modes of Git's index file (versions 2 and 3, which
// is what the hardened Git writes; version 4 compresses paths, and is refused).
// Entries come sorted by path, as Git keeps them.
func readIndex(path string) ([]indexEntry, error) {
	b, _, release, err := mapIndex(path)
	if err != nil {
		return nil, err
	}
	defer release()
	var ents []indexEntry
	err = parseIndex(b, func(n int) { ents = make([]indexEntry, 0, n) }, nil, func(e indexEntry) { ents = append(ents, e) })
	return ents, err
}

// readIndexPaths is readIndex of just the entries at the paths in want: one pass
// over the file that makes no string of the other paths, since a string of every
// path of a big tree would be fresh heap paid for in page faults.
func readIndexPaths(path string, want map[string]bool) (map[string]indexEntry, error) {
	b, _, release, err := mapIndex(path)
	if err != nil {
		return nil, err
	}
	defer release()
	got := make(map[string]indexEntry, len(want))
	err = parseIndex(b, func(int) {}, func(p []byte) bool { return want[string(p)] }, func(e indexEntry) { got[e.path] = e })
	return got, err
}

// mapIndex returns the bytes of the index file at path, mapped read-only from the
// page cache and populated in one system call, the file's fstat, and the function
// that unmaps them (nothing may keep a slice of them after it). Reading a big
// index into fresh heap would cost a zeroing and a page fault per page; Git maps
// its index the same way. (A private writable mapping is no cheaper: populating
// it copies every page, to break copy-on-write before any write, and unmapping
// frees the copies.) Nothing
// truncates the index while it is mapped: Git and the recorder replace it by
// rename, under the store's lock.
func mapIndex(path string) (b []byte, st unix.Stat_t, release func(), err error) {
	ix, err := openIndex(path)
	if err != nil {
		return nil, st, nil, err
	}
	unix.Close(ix.fd)
	ix.fd = -1
	return ix.b, ix.st, ix.close, nil
}

// mappedIndex is an index file open and mapped, as mapIndex maps it.
type mappedIndex struct {
	fd int
	b  []byte
	st unix.Stat_t
}

// openIndex opens and maps the index file at path, as mapIndex.
func openIndex(path string) (*mappedIndex, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	ix := &mappedIndex{fd: fd, b: []byte{}}
	if err := unix.Fstat(fd, &ix.st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if ix.st.Mode&unix.S_IFMT != unix.S_IFREG || ix.st.Size > maxIndexSize {
		unix.Close(fd)
		return nil, fmt.Errorf("index %s: not a regular file of at most %d bytes", path, maxIndexSize)
	}
	if ix.st.Size > 0 {
		if ix.b, err = unix.Mmap(fd, 0, int(ix.st.Size), unix.PROT_READ, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
			unix.Close(fd)
			return nil, &os.PathError{Op: "mmap", Path: path, Err: err}
		}
	}
	return ix, nil
}

// close unmaps the index and closes its file.
func (ix *mappedIndex) close() {
	if len(ix.b) > 0 {
		_ = unix.Munmap(ix.b)
	}
	ix.b = nil
	if ix.fd >= 0 {
		unix.Close(ix.fd)
		ix.fd = -1
	}
}

// maxIndexSize bounds the index mapIndex maps: far above any tree the walk's own
// entry bound lets through.
const maxIndexSize = 4 << 30

// parseIndex calls add with each entry of the index b whose path keep accepts (nil:
// every one), after calling size with the entry count.
func parseIndex(b []byte, size func(int), keep func([]byte) bool, add func(indexEntry)) error {
	n, err := indexHeader(b)
	if err != nil {
		return err
	}
	size(n)
	_, err = eachEntry(b, n, func(off, start, end int) error {
		if binary.BigEndian.Uint16(b[off+60:off+62])&0x3000 != 0 {
			return errors.New("index: unmerged entry")
		}
		if p := b[start:end]; keep == nil || keep(p) {
			var oid [20]byte
			copy(oid[:], b[off+40:off+60])
			add(indexEntry{
				path:  string(p),
				ctime: int64(binary.BigEndian.Uint32(b[off:off+4]))*1_000_000_000 + int64(binary.BigEndian.Uint32(b[off+4:off+8])),
				ino:   binary.BigEndian.Uint32(b[off+20 : off+24]),
				mode:  binary.BigEndian.Uint32(b[off+24 : off+28]),
				size:  binary.BigEndian.Uint32(b[off+36 : off+40]),
				oid:   oid,
			})
		}
		return nil
	})
	return err
}

// indexHeader checks the header of the index b (a version 2 or 3 index: version
// 4 compresses paths, and is refused) and returns its entry count.
func indexHeader(b []byte) (int, error) {
	if len(b) < 12 || string(b[:4]) != "DIRC" {
		return 0, errors.New("index: no DIRC header")
	}
	if ver := binary.BigEndian.Uint32(b[4:8]); ver != 2 && ver != 3 {
		return 0, fmt.Errorf("index: version %d not read here", ver)
	}
	n := int(binary.BigEndian.Uint32(b[8:12]))
	if n > len(b)/62 {
		return 0, errors.New("index: entry count beyond the file")
	}
	return n, nil
}

// eachEntry walks the n entries of the index b, calling fn with each one's offset
// and the bounds of its path, and returns where the entries end (the extensions
// begin).
func eachEntry(b []byte, n int, fn func(off, pathStart, pathEnd int) error) (int, error) {
	off := 12
	for range n {
		if off+62 > len(b) {
			return 0, errors.New("index: truncated entry")
		}
		fixed := 62
		if binary.BigEndian.Uint16(b[off+60:off+62])&0x4000 != 0 { // extended flags (version 3)
			fixed += 2
		}
		start := off + fixed
		if start > len(b) {
			return 0, errors.New("index: truncated entry")
		}
		end := bytes.IndexByte(b[start:], 0)
		if end < 0 {
			return 0, errors.New("index: unterminated path")
		}
		if err := fn(off, start, start+end); err != nil {
			return 0, err
		}
		// The entry is padded with 1 to 8 NULs to a multiple of 8 bytes.
		off += (fixed + end + 8) &^ 7
	}
	if off > len(b) {
		return 0, errors.New("index: truncated entry")
	}
	return off, nil
}

// IndexEntries is how many entries the shadow index of repo holds (0 when there is
// none or it cannot be read): a size hint for the launch walk's list
// (audit.ScanOptions.WalkHint), read from the index's 12-byte header.
func IndexEntries(stateDir, repo string) int {
	fd, err := unix.Open(filepath.Join(Dir(stateDir, repo), "index"), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return 0
	}
	defer unix.Close(fd)
	var hdr [12]byte
	if n, err := unix.Pread(fd, hdr[:], 0); err != nil || n != len(hdr) || string(hdr[:4]) != "DIRC" {
		return 0
	}
	return int(binary.BigEndian.Uint32(hdr[8:]))
}
