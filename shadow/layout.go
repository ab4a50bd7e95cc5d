package shadow

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"
)

// The index's layout, kept beside it. Git's index entries have variable lengths, so
// finding ten paths in it means walking every entry from the start — 100,000 of
// them, and checking the file's SHA-1 first (layoutOf): about 20 ms of a ten-file
// session's record end on the scaling bench's big tree. A staging in place moves no
// entry (it patches them where they are), so the layout found once serves every
// staging after it, until Git writes the index again.
//
// layoutFile holds: "ABXL", the trailing checksum of the index it describes (20
// bytes), the entry count, where the extensions start, and each entry's offset, as
// big-endian uint32s. It is used only for the index whose trailing checksum it
// names, and only when its offsets are in order, 8-byte aligned steps of at least
// an entry's size, within the file, and as many as the index's header says; the
// entries found through it are then checked by path (findEntry). A layout that is
// missing, or names another index, is read again the slow way and rewritten.
const layoutFile = "agentbox-index-layout"

const (
	layoutMagic  = "ABXL"
	layoutSumAt  = 4            // where the index's checksum is in layoutFile
	layoutHeader = 4 + 20 + 4*2 // magic, checksum, count, extensions
	minEntrySize = 64           // 62 bytes of stat data and flags, a name byte, a NUL, padded to 8
)

// indexLayout returns the layout of the index b: from layoutFile when it describes
// b, else by layoutOf (which checks b's checksum), then kept for the next staging.
func (s *Store) indexLayout(b []byte) (indexLayout, error) {
	if l, ok := s.readLayout(b); ok {
		return l, nil
	}
	l, err := layoutOf(b)
	if err != nil {
		return l, err
	}
	s.writeLayout(b[len(b)-20:], l)
	return l, nil
}

// readLayout reads layoutFile when it describes the index b, as above.
func (s *Store) readLayout(b []byte) (indexLayout, bool) {
	n, err := indexHeader(b)
	if err != nil || len(b) < 12+20 {
		return indexLayout{}, false
	}
	f, err := os.ReadFile(filepath.Join(s.Dir, layoutFile))
	if err != nil || len(f) != layoutHeader+4*n || string(f[:4]) != layoutMagic ||
		!bytes.Equal(f[layoutSumAt:layoutSumAt+20], b[len(b)-20:]) ||
		int(binary.BigEndian.Uint32(f[24:28])) != n {
		return indexLayout{}, false
	}
	l := indexLayout{ext: int(binary.BigEndian.Uint32(f[28:32])), offsets: make([]int, n)}
	if l.ext > len(b)-20 {
		return indexLayout{}, false
	}
	prev := 12 - minEntrySize
	for i := range l.offsets {
		off := int(binary.BigEndian.Uint32(f[layoutHeader+4*i:]))
		if off < prev+minEntrySize || (off-12)%8 != 0 {
			return indexLayout{}, false
		}
		l.offsets[i], prev = off, off
	}
	if n > 0 && l.offsets[0] != 12 || prev+minEntrySize > l.ext {
		return indexLayout{}, false
	}
	return l, true
}

// writeLayout keeps l as the layout of the index whose checksum is sum. A failure
// leaves no layout file: the next staging reads the index.
func (s *Store) writeLayout(sum []byte, l indexLayout) {
	p := filepath.Join(s.Dir, layoutFile)
	if l.ext > 1<<32-1 {
		os.Remove(p)
		return
	}
	f := make([]byte, layoutHeader, layoutHeader+4*len(l.offsets))
	copy(f, layoutMagic)
	copy(f[layoutSumAt:], sum)
	binary.BigEndian.PutUint32(f[24:], uint32(len(l.offsets)))
	binary.BigEndian.PutUint32(f[28:], uint32(l.ext))
	for _, off := range l.offsets {
		f = binary.BigEndian.AppendUint32(f, uint32(off))
	}
	tmp := p + ".tmp"
	if os.WriteFile(tmp, f, 0o600) != nil || os.Rename(tmp, p) != nil {
		os.Remove(tmp)
		os.Remove(p)
	}
}

// relabelLayout says the layout kept for the index whose checksum was old describes
// the index whose checksum is now new (a staging in place moved no entry). Twenty
// bytes written where they lie: no new file. A layout file that does not name old is
// not relabelled (it describes some other index, and stays unused).
func (s *Store) relabelLayout(old, new []byte) {
	p := filepath.Join(s.Dir, layoutFile)
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	cur := make([]byte, 20)
	if n, err := unix.Pread(fd, cur, layoutSumAt); err != nil || n != 20 || !bytes.Equal(cur, old) {
		return
	}
	if n, err := unix.Pwrite(fd, new, layoutSumAt); err != nil || n != 20 {
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
	return i, int(binary.BigEndian.Uint16(x.b[x.off[i]+60:])&0xfff) == min(len(want), 0xfff)
}
