// Package gitindex writes Git index files for tests: what a session can put at
// .git/index itself, bypassing the checks Git makes only when it adds a path.
package gitindex

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"sort"
)

// Index describes the entries of an index: every entry names the same blob.
type Index struct {
	Version  int    // 2, 3 or 4 (4: paths prefix-compressed)
	OID      []byte // the blob's object id; its length is the hash's (20 or 32)
	Mode     uint32 // the entries' mode, e.g. 0o100644
	Size     uint32 // the entries' file size
	Extended bool   // every entry has extended flags (intent to add; version 3+)
}

// Bytes is the index naming paths (sorted, as Git writes them), with its checksum.
func (x Index) Bytes(paths []string) []byte {
	paths = append([]string(nil), paths...)
	sort.Strings(paths)
	var b bytes.Buffer
	b.WriteString("DIRC")
	binary.Write(&b, binary.BigEndian, []uint32{uint32(x.Version), uint32(len(paths))})
	prev := ""
	for _, p := range paths {
		var e bytes.Buffer
		binary.Write(&e, binary.BigEndian, []uint32{0, 0, 0, 0, 0, 0, x.Mode, 0, 0, x.Size})
		e.Write(x.OID)
		flags := uint16(min(len(p), 0xfff))
		if x.Extended {
			flags |= 0x4000
		}
		binary.Write(&e, binary.BigEndian, flags)
		if x.Extended {
			binary.Write(&e, binary.BigEndian, uint16(0x2000)) // intent to add
		}
		if x.Version == 4 {
			// Prefix compression: strip of prev what differs (one byte offsets
			// suffice for test paths).
			common := 0
			for common < len(p) && common < len(prev) && p[common] == prev[common] {
				common++
			}
			e.WriteByte(byte(len(prev) - common))
			e.WriteString(p[common:])
			e.WriteByte(0)
		} else {
			e.WriteString(p)
			e.Write(make([]byte, 8-e.Len()%8))
		}
		b.Write(e.Bytes())
		prev = p
	}
	if len(x.OID) == 32 {
		sum := sha256.Sum256(b.Bytes())
		return append(b.Bytes(), sum[:]...)
	}
	sum := sha1.Sum(b.Bytes())
	return append(b.Bytes(), sum[:]...)
}

// PointSparseDir returns a copy of idx, a SHA-1 index Git wrote, whose sparse
// directory entry dir ("sub/", mode 040000) names the tree oid instead, with the
// checksum made again: a session's plant of a tree Git has not checked. ok is false
// when idx has no such entry.
func PointSparseDir(idx []byte, dir string, oid []byte) (out []byte, ok bool) {
	out = append([]byte(nil), idx...)
	at := bytes.Index(out, []byte("\x00"+dir+"\x00"))
	if at < 0 || len(oid) != sha1.Size {
		return nil, false
	}
	name := at + 1
	for _, fixed := range []int{62, 64} { // the entry's head without, with extended flags
		e := name - fixed
		if e >= 12 && binary.BigEndian.Uint32(out[e+24:e+28]) == 0o040000 {
			copy(out[e+40:e+60], oid)
			sum := sha1.Sum(out[:len(out)-sha1.Size])
			copy(out[len(out)-sha1.Size:], sum[:])
			return out, true
		}
	}
	return nil, false
}
