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
	if len(b) < 12 || string(b[:4]) != "DIRC" {
		return nil, errors.New("index: no DIRC header")
	}
	ver := binary.BigEndian.Uint32(b[4:8])
	if ver != 2 && ver != 3 {
		return nil, fmt.Errorf("index: version %d not read here", ver)
	}
	n := int(binary.BigEndian.Uint32(b[8:12]))
	if n > len(b)/62 {
		return nil, errors.New("index: entry count beyond the file")
	}
	ents := make([]indexEntry, 0, n)
	off := 12
	for range n {
		if off+62 > len(b) {
			return nil, errors.New("index: truncated entry")
		}
		ctime := int64(binary.BigEndian.Uint32(b[off:off+4]))*1_000_000_000 + int64(binary.BigEndian.Uint32(b[off+4:off+8]))
		ino := binary.BigEndian.Uint32(b[off+20 : off+24])
		mode := binary.BigEndian.Uint32(b[off+24 : off+28])
		size := binary.BigEndian.Uint32(b[off+36 : off+40])
		var oid [20]byte
		copy(oid[:], b[off+40:off+60])
		flags := binary.BigEndian.Uint16(b[off+60 : off+62])
		fixed := 62
		if flags&0x4000 != 0 { // extended flags (version 3)
			fixed += 2
		}
		if flags&0x3000 != 0 {
			return nil, errors.New("index: unmerged entry")
		}
		start := off + fixed
		if start > len(b) {
			return nil, errors.New("index: truncated entry")
		}
		end := bytes.IndexByte(b[start:], 0)
		if end < 0 {
			return nil, errors.New("index: unterminated path")
		}
		ents = append(ents, indexEntry{path: string(b[start : start+end]), mode: mode, ino: ino, size: size, ctime: ctime, oid: oid})
		// The entry is padded with 1 to 8 NULs to a multiple of 8 bytes.
		off += (fixed + end + 8) &^ 7
	}
	return ents, nil
}
