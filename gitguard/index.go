package gitguard

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The index (the staging area) names the paths Git writes when the operator
// discards changes (git checkout -- ., git restore, git checkout-index, git stash).
// Git refuses a path with a ".git" component when it adds it to the index, not when
// it reads an index file, so an index a sandbox wrote can make the operator's Git
// write a hook into .git/hooks. The audit (gitguard/audit) and undo --git
// (gitguard/snapshot) read an index with UnsafeIndexPaths before Git may.

// MaxIndexNamed bounds the paths UnsafeIndexPaths names.
const MaxIndexNamed = 3

// UnsafeIndexPaths reads an index (Documentation/gitformat-index.txt, versions 2 to 4)
// with object ids of hashSize bytes from r, and returns the first MaxIndexNamed of
// its entries' paths that unsafeIndexPath refuses, and their count. Extensions and
// the checksum after the entries are not read.
func UnsafeIndexPaths(r *bufio.Reader, hashSize int) (bad []string, n int, err error) {
	var hdr [12]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, 0, fmt.Errorf("header: %w", err)
	}
	version := binary.BigEndian.Uint32(hdr[4:8])
	if string(hdr[:4]) != "DIRC" || version < 2 || version > 4 {
		return nil, 0, errors.New("not an index of version 2, 3 or 4")
	}
	count := binary.BigEndian.Uint32(hdr[8:12])
	fixed := 40 + hashSize + 2 // stat data, object id, flags
	buf := make([]byte, fixed+2)
	var prev []byte
	empty := 0
	for i := uint32(0); i < count; i++ {
		if _, err := io.ReadFull(r, buf[:fixed]); err != nil {
			return nil, 0, fmt.Errorf("entry %d: %w", i, err)
		}
		flags := binary.BigEndian.Uint16(buf[fixed-2 : fixed])
		size := fixed
		if flags&0x4000 != 0 { // extended flags, 2 more bytes
			if version < 3 {
				return nil, 0, fmt.Errorf("entry %d: extended flags in a version 2 index", i)
			}
			if _, err := io.ReadFull(r, buf[fixed:fixed+2]); err != nil {
				return nil, 0, fmt.Errorf("entry %d: %w", i, err)
			}
			size += 2
		}
		var path []byte
		if version == 4 {
			strip, err := indexVarint(r)
			if err != nil || strip > uint64(len(prev)) {
				return nil, 0, fmt.Errorf("entry %d: bad path prefix", i)
			}
			suffix, err := r.ReadSlice(0)
			if err != nil {
				return nil, 0, fmt.Errorf("entry %d: path: %w", i, err)
			}
			path = append(prev[:len(prev)-int(strip)], suffix[:len(suffix)-1]...)
		} else {
			name, err := r.ReadSlice(0)
			if err != nil {
				return nil, 0, fmt.Errorf("entry %d: path: %w", i, err)
			}
			path = append(prev[:0], name[:len(name)-1]...)
			// Entries are padded with 1 to 8 NULs to a multiple of 8 bytes.
			pad := 8 - (size+len(path))%8
			if _, err := r.Discard(pad - 1); err != nil {
				return nil, 0, fmt.Errorf("entry %d: padding: %w", i, err)
			}
		}
		prev = path
		if len(path) == 0 {
			empty++ // a split index's replacement of a shared entry, whose name is there
			continue
		}
		name := path
		if binary.BigEndian.Uint32(buf[24:28]) == 0o040000 && name[len(name)-1] == '/' {
			name = name[:len(name)-1] // a sparse index's directory entry: "dir/"
		}
		if unsafeIndexPath(name) {
			if n < MaxIndexNamed {
				bad = append(bad, string(path))
			}
			n++
		}
	}
	// A split index (its "link" extension, which Git writes first after the
	// entries) replaces shared entries with unnamed ones; elsewhere an entry without
	// a name is not Git's.
	if sig, _ := r.Peek(4); empty > 0 && string(sig) != "link" {
		if n < MaxIndexNamed {
			bad = append(bad, "")
		}
		n += empty
	}
	return bad, n, nil
}

// indexVarint reads the offset encoding of an index v4 path prefix (Git's
// varint.c): seven bits a byte, most significant first, each continuation adding
// one.
func indexVarint(r *bufio.Reader) (uint64, error) {
	c, err := r.ReadByte()
	if err != nil {
		return 0, err
	}
	v := uint64(c & 0x7f)
	for c&0x80 != 0 {
		if c, err = r.ReadByte(); err != nil {
			return 0, err
		}
		if v+1 > 1<<56 {
			return 0, errors.New("overflow")
		}
		v = (v+1)<<7 | uint64(c&0x7f)
	}
	return v, nil
}

// unsafeIndexPath reports whether Git must not write an index entry's path: one
// that is absolute, or has an empty, "." or ".." component, or a ".git" one in any
// case (a case-insensitive filesystem takes ".GIT" for ".git"). It reads the bytes
// where they lie: an index has a path per tracked file.
func unsafeIndexPath(p []byte) bool {
	if len(p) == 0 || p[0] == '/' {
		return true
	}
	for len(p) > 0 {
		c := p
		if i := bytes.IndexByte(p, '/'); i >= 0 {
			c, p = p[:i], p[i+1:]
			if len(p) == 0 {
				return true // a trailing slash: an empty last component
			}
		} else {
			p = nil
		}
		switch len(c) {
		case 0:
			return true
		case 1:
			if c[0] == '.' {
				return true
			}
		case 2:
			if c[0] == '.' && c[1] == '.' {
				return true
			}
		case 4:
			if c[0] == '.' && bytes.EqualFold(c[1:], []byte("git")) {
				return true
			}
		}
	}
	return false
}
