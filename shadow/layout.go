package shadow

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"sort"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The index's layout, kept beside it. Git's index entries have variable lengths, so
// finding ten paths in it means walking every entry from the start, and checking the
// file's SHA-1 first (layoutOf), which a big tree makes costly. A staging in place
// moves no entry (it patches them where they are), so the layout found once serves
// every staging after it, until Git writes the index again.
//
// layoutFile holds: a magic naming the byte order of the offsets ("ABXl" or
// "ABXb"), the key of the index it describes (its trailing checksum, and the file's
// inode, size, ctime and mtime), the entry count and where the extensions start (as
// big-endian uint32s), and each entry's offset as a uint32 in the host's byte
// order, so that the staging reads them where they are mapped instead of copying
// them into fresh heap (on a VM whose page faults cost 10 µs or more, the 80 KB of a
// 20,000-file tree's offsets cost half a millisecond of the record's end). A file
// written in the other byte order, or with the big-endian offsets of older versions
// ("ABXL"), is not used, and is rewritten. It is used only
// for the index file whose key it holds — the checksum names the content, the stat
// data the file: bytes changed under an unchanged checksum, by any writer but a
// failing disk, change the file's ctime, and the index is then read (and its
// checksum checked) again — and only when its offsets are in order, 8-byte aligned
// steps of at least an entry's size, within the file, and as many as the index's
// header says; the entries found through it are then checked by path and name
// length (findEntry). A layout that is missing, or names another index, is read
// again the slow way and rewritten.
const layoutFile = "agentbox-index-layout"

const (
	layoutMagic  = "ABX"                  // and the offsets' byte order (layoutOrder)
	layoutKeyAt  = 4                      // where the index's key is in layoutFile
	layoutKeyLen = 20 + 4*8               // checksum; inode, size, ctime, mtime
	layoutHeader = 4 + layoutKeyLen + 4*2 // magic, key, count, extensions
	minEntrySize = 64                     // 62 bytes of stat data and flags, a name byte, a NUL, padded to 8
)

// indexKey is the key of the index file whose bytes are b and whose fstat is st.
func indexKey(b []byte, st *unix.Stat_t) []byte {
	k := make([]byte, 0, layoutKeyLen)
	if len(b) >= 20 {
		k = append(k, b[len(b)-20:]...)
	} else {
		k = append(k, make([]byte, 20)...)
	}
	for _, v := range []int64{int64(st.Ino), st.Size, st.Ctim.Nano(), st.Mtim.Nano()} {
		k = binary.BigEndian.AppendUint64(k, uint64(v))
	}
	return k
}

// layoutOrder is the last byte of layoutFile's magic: the host's byte order, in
// which its offsets are.
func layoutOrder() byte {
	if binary.NativeEndian.Uint16([]byte{1, 0}) == 1 {
		return 'l'
	}
	return 'b'
}

// indexLayout returns the layout of the index b, whose file's fstat is st: from
// layoutFile when it describes that file, else by layoutOf (which checks b's
// checksum), then kept for the next staging. The layout's offsets may lie in
// layoutFile's mapping: release unmaps it, once they are no longer read.
func (s *Store) indexLayout(b []byte, st *unix.Stat_t) (l indexLayout, release func(), err error) {
	key := indexKey(b, st)
	if l, release, ok := s.readLayout(b, key); ok {
		return l, release, nil
	}
	l, err = layoutOf(b)
	if err != nil {
		return l, func() {}, err
	}
	s.writeLayout(key, l)
	return l, func() {}, nil
}

// readLayout reads layoutFile when it describes the index b whose key is key, as
// above; the offsets returned are its mapping's, which release unmaps.
func (s *Store) readLayout(b, key []byte) (indexLayout, func(), bool) {
	n, err := indexHeader(b)
	if err != nil || len(b) < 12+20 {
		return indexLayout{}, nil, false
	}
	// Mapped (MAP_POPULATE: no fault on reading it), not read into fresh heap. It
	// is written by rename, and its key in place, never truncated (the index's
	// rule), so the mapping stays whole while the staging reads it.
	f, _, release, err := mapIndex(filepath.Join(s.Dir, layoutFile))
	if err != nil {
		return indexLayout{}, nil, false
	}
	at := layoutKeyAt + layoutKeyLen
	if len(f) != layoutHeader+4*n || string(f[:3]) != layoutMagic || f[3] != layoutOrder() ||
		!bytes.Equal(f[layoutKeyAt:at], key) || int(binary.BigEndian.Uint32(f[at:])) != n {
		release()
		return indexLayout{}, nil, false
	}
	l := indexLayout{ext: int(binary.BigEndian.Uint32(f[at+4:]))}
	if l.ext > len(b)-20 {
		release()
		return indexLayout{}, nil, false
	}
	if n > 0 {
		// The mapping is page-aligned and layoutHeader a multiple of 4.
		l.offsets = unsafe.Slice((*uint32)(unsafe.Pointer(&f[layoutHeader])), n)
	}
	prev := 12 - minEntrySize
	for _, off := range l.offsets {
		if o := int(off); o < prev+minEntrySize || (o-12)%8 != 0 {
			release()
			return indexLayout{}, nil, false
		}
		prev = int(off)
	}
	if n > 0 && l.offsets[0] != 12 || prev+minEntrySize > l.ext {
		release()
		return indexLayout{}, nil, false
	}
	return l, release, true
}

// writeLayout keeps l as the layout of the index whose key is key. A failure
// leaves no layout file: the next staging reads the index.
func (s *Store) writeLayout(key []byte, l indexLayout) {
	p := filepath.Join(s.Dir, layoutFile)
	if l.ext > 1<<32-1 || len(key) != layoutKeyLen {
		os.Remove(p)
		return
	}
	at := layoutKeyAt + layoutKeyLen
	f := make([]byte, layoutHeader, layoutHeader+4*len(l.offsets))
	copy(f, layoutMagic)
	f[3] = layoutOrder()
	copy(f[layoutKeyAt:], key)
	binary.BigEndian.PutUint32(f[at:], uint32(len(l.offsets)))
	binary.BigEndian.PutUint32(f[at+4:], uint32(l.ext))
	for _, off := range l.offsets {
		f = binary.NativeEndian.AppendUint32(f, off)
	}
	tmp := p + ".tmp"
	if os.WriteFile(tmp, f, 0o600) != nil || os.Rename(tmp, p) != nil {
		os.Remove(tmp)
		os.Remove(p)
	}
}

// relabelLayout says the layout kept for the index whose key was old describes the
// index file now at the index's path, whose checksum is sum (a staging in place
// moved no entry): its key is written where the old one lies, no new file. A
// layout file that does not hold old is not relabelled (it describes some other
// index, and stays unused); one that cannot be relabelled is removed.
func (s *Store) relabelLayout(old, sum []byte) {
	p := filepath.Join(s.Dir, layoutFile)
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	cur := make([]byte, layoutKeyLen)
	if n, err := unix.Pread(fd, cur, layoutKeyAt); err != nil || n != layoutKeyLen || !bytes.Equal(cur, old) {
		return
	}
	// The new file's stat data, after the rename and the mtime put back (both
	// change its ctime); the store's lock keeps other writers away meanwhile.
	var st unix.Stat_t
	if unix.Lstat(filepath.Join(s.Dir, "index"), &st) != nil {
		os.Remove(p)
		return
	}
	key := indexKey(sum, &st)
	if n, err := unix.Pwrite(fd, key, layoutKeyAt); err != nil || n != layoutKeyLen {
		os.Remove(p)
	}
}

// findEntry returns the index (in index order) of the entry at path p, by binary
// search: Git keeps entries sorted by their names' bytes (stage 0 entries, the
// only ones the recorder edits, have one name each).
// The entry found is checked to be one: its flags give its name's length.
func findEntry(x indexEntries, p string) (int, bool) {
	want := []byte(p)
	i := sort.Search(len(x.off), func(i int) bool { return bytes.Compare(x.path(i), want) >= 0 })
	if i == len(x.off) || !bytes.Equal(x.path(i), want) {
		return 0, false
	}
	return i, int(binary.BigEndian.Uint16(x.b[int(x.off[i])+60:])&0xfff) == min(len(want), 0xfff)
}
