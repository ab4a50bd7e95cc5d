package shadow

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
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
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var ents []indexEntry
	err = parseIndex(b, func(n int) { ents = make([]indexEntry, 0, n) }, nil, func(e indexEntry) { ents = append(ents, e) })
	return ents, err
}

// readIndexPaths is readIndex of just the entries at the paths in want: one pass
// over the file that makes no string of the other paths (a fresh heap's pages
// cost a fault each on a VM; the whole index is 100,000 strings on a big tree).
func readIndexPaths(path string, want map[string]bool) (map[string]indexEntry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	got := make(map[string]indexEntry, len(want))
	err = parseIndex(b, func(int) {}, func(p []byte) bool { return want[string(p)] }, func(e indexEntry) { got[e.path] = e })
	return got, err
}

// parseIndex calls add with each entry of the index b whose path keep accepts (nil:
// every one), after calling size with the entry count.
func parseIndex(b []byte, size func(int), keep func([]byte) bool, add func(indexEntry)) error {
	if len(b) < 12 || string(b[:4]) != "DIRC" {
		return errors.New("index: no DIRC header")
	}
	ver := binary.BigEndian.Uint32(b[4:8])
	if ver != 2 && ver != 3 {
		return fmt.Errorf("index: version %d not read here", ver)
	}
	n := int(binary.BigEndian.Uint32(b[8:12]))
	if n > len(b)/62 {
		return errors.New("index: entry count beyond the file")
	}
	size(n)
	off := 12
	for range n {
		if off+62 > len(b) {
			return errors.New("index: truncated entry")
		}
		flags := binary.BigEndian.Uint16(b[off+60 : off+62])
		fixed := 62
		if flags&0x4000 != 0 { // extended flags (version 3)
			fixed += 2
		}
		if flags&0x3000 != 0 {
			return errors.New("index: unmerged entry")
		}
		start := off + fixed
		if start > len(b) {
			return errors.New("index: truncated entry")
		}
		end := bytes.IndexByte(b[start:], 0)
		if end < 0 {
			return errors.New("index: unterminated path")
		}
		if p := b[start : start+end]; keep == nil || keep(p) {
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
		// The entry is padded with 1 to 8 NULs to a multiple of 8 bytes.
		off += (fixed + end + 8) &^ 7
	}
	return nil
}
