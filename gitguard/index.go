package gitguard

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
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
// its entries' paths that unsafeIndexPath refuses, and their count. Of the
// extensions after the entries it reads those that tell Git where entries lie (see
// entryOffsets).
func UnsafeIndexPaths(r *bufio.Reader, hashSize int) (bad []string, n int, err error) {
	names, err := ReadIndexNames(r, hashSize)
	return names.Bad, names.N, err
}

// IndexNames is what ReadIndexNames found in an index.
type IndexNames struct {
	Bad []string // the first MaxIndexNamed paths unsafeIndexPath refuses
	N   int      // how many it refuses
	// SparseDirs counts a sparse index's directory entries ("dir/", mode 040000),
	// each naming a tree that Git expands into entries when it reads the index in
	// a repository that does not keep it sparse.
	SparseDirs int
}

// ReadIndexNames is UnsafeIndexPaths', with the count of sparse directory entries.
func ReadIndexNames(r *bufio.Reader, hashSize int) (IndexNames, error) {
	bad, n, dirs, err := readIndexNames(r, hashSize)
	if err != nil {
		return IndexNames{}, err
	}
	return IndexNames{Bad: bad, N: n, SparseDirs: dirs}, nil
}

func readIndexNames(r *bufio.Reader, hashSize int) (bad []string, n, dirs int, err error) {
	var hdr [12]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, 0, 0, fmt.Errorf("header: %w", err)
	}
	version := binary.BigEndian.Uint32(hdr[4:8])
	if string(hdr[:4]) != "DIRC" || version < 2 || version > 4 {
		return nil, 0, 0, errors.New("not an index of version 2, 3 or 4")
	}
	count := binary.BigEndian.Uint32(hdr[8:12])
	fixed := 40 + hashSize + 2 // stat data, object id, flags
	buf := make([]byte, fixed+2)
	var prev []byte
	empty := 0
	// starts[i] is where entry i begins, or 0 for a version 4 entry whose name
	// keeps part of the previous one (Git cannot begin a block of entries there).
	starts := make([]uint32, 0, min(count, 1<<20))
	off := uint64(len(hdr))
	for i := uint32(0); i < count; i++ {
		start := off
		if _, err := io.ReadFull(r, buf[:fixed]); err != nil {
			return nil, 0, 0, fmt.Errorf("entry %d: %w", i, err)
		}
		flags := binary.BigEndian.Uint16(buf[fixed-2 : fixed])
		size := fixed
		if flags&0x4000 != 0 { // extended flags, 2 more bytes
			if version < 3 {
				return nil, 0, 0, fmt.Errorf("entry %d: extended flags in a version 2 index", i)
			}
			if _, err := io.ReadFull(r, buf[fixed:fixed+2]); err != nil {
				return nil, 0, 0, fmt.Errorf("entry %d: %w", i, err)
			}
			size += 2
		}
		off += uint64(size)
		var path []byte
		if version == 4 {
			strip, k, err := indexVarint(r)
			if err != nil || strip > uint64(len(prev)) {
				return nil, 0, 0, fmt.Errorf("entry %d: bad path prefix", i)
			}
			suffix, err := r.ReadSlice(0)
			if err != nil {
				return nil, 0, 0, fmt.Errorf("entry %d: path: %w", i, err)
			}
			if strip != uint64(len(prev)) {
				start = 0
			}
			off += uint64(k + len(suffix))
			path = append(prev[:len(prev)-int(strip)], suffix[:len(suffix)-1]...)
		} else {
			name, err := r.ReadSlice(0)
			if err != nil {
				return nil, 0, 0, fmt.Errorf("entry %d: path: %w", i, err)
			}
			path = append(prev[:0], name[:len(name)-1]...)
			// Entries are padded with 1 to 8 NULs to a multiple of 8 bytes.
			pad := 8 - (size+len(path))%8
			if _, err := r.Discard(pad - 1); err != nil {
				return nil, 0, 0, fmt.Errorf("entry %d: padding: %w", i, err)
			}
			off += uint64(len(path) + pad)
		}
		starts = append(starts, uint32(min(start, 1<<32-1)))
		// Git takes a name's length from the flags (the NUL only when they say
		// 0xfff) and from it where a version 2-3 entry, or a version 4 name's
		// suffix, ends. Git writes the two equal; where they differ, Git and this
		// reader would part on where every later entry lies.
		if nameLen := int(flags & 0xfff); nameLen != min(len(path), 0xfff) {
			return nil, 0, 0, fmt.Errorf("entry %d: its flags give its name %d bytes, its name has %d", i, nameLen, len(path))
		}
		prev = path
		if len(path) == 0 {
			empty++ // a split index's replacement of a shared entry, whose name is there
			continue
		}
		name := path
		if binary.BigEndian.Uint32(buf[24:28]) == 0o040000 && name[len(name)-1] == '/' {
			name = name[:len(name)-1] // a sparse index's directory entry: "dir/"
			dirs++
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
	if err := entryOffsets(r, hashSize, off, starts); err != nil {
		return nil, 0, 0, err
	}
	return bad, n, dirs, nil
}

// entryOffsets reads the extensions after an index's entries, which end at
// entriesEnd and begin at starts, to the end of the file. Git reading an index on
// several threads (index.threads, or 10,000 entries a core) takes where to read
// extensions from the EOIE extension it finds just before the checksum, and where
// each block of entries begins from the IEOT extension, not from the entries
// before: an IEOT pointing into another extension's data would make Git read
// entries the loop above never met. So an EOIE must be the last extension walked
// from the entries' end and point there, and every IEOT's blocks must begin at
// entries in their order (a version 4 entry that keeps no prefix) and cover them all.
func entryOffsets(r *bufio.Reader, hashSize int, entriesEnd uint64, starts []uint32) error {
	const eoieSize = 4 + 4 + 4   // signature, size, then its offset (and hash)
	var tail [eoieSize + 64]byte // the last bytes read: Git looks for its EOIE there
	total := entriesEnd
	keep := func(b []byte) {
		if len(b) >= len(tail) {
			copy(tail[:], b[len(b)-len(tail):])
		} else {
			copy(tail[:], tail[len(b):])
			copy(tail[len(tail)-len(b):], b)
		}
		total += uint64(len(b))
	}
	walkedEOIE := uint64(0) // where the walk met an EOIE, or 0
	var eoieOffset uint32
	scratch := make([]byte, 32<<10)
	for {
		h, _ := r.Peek(8 + hashSize)
		if len(h) < 8+hashSize {
			break // the checksum
		}
		sig, size := string(h[:4]), binary.BigEndian.Uint32(h[4:8])
		at := total
		keep(h[:8])
		r.Discard(8)
		var data []byte
		if sig == "IEOT" || sig == "EOIE" {
			if uint64(size) > 4+8*uint64(len(starts)+1) {
				return fmt.Errorf("%s extension of %d bytes for %d entries", sig, size, len(starts))
			}
			data = make([]byte, size)
			if _, err := io.ReadFull(r, data); err != nil {
				return fmt.Errorf("%s extension: %w", sig, err)
			}
			keep(data)
		} else {
			for left := uint64(size); left > 0; {
				k, err := r.Read(scratch[:min(left, uint64(len(scratch)))])
				keep(scratch[:k])
				left -= uint64(k)
				if err != nil && left > 0 {
					return fmt.Errorf("%s extension: %w", sig, err)
				}
			}
		}
		switch {
		case sig == "EOIE" && len(data) >= 4:
			walkedEOIE, eoieOffset = at, binary.BigEndian.Uint32(data)
		case sig == "IEOT" && len(data) >= 4 && binary.BigEndian.Uint32(data) == 1 && (len(data)-4)%8 == 0:
			// Git uses only a version 1 table of whole (offset, count) pairs.
			k := uint64(0)
			for b := data[4:]; len(b) > 0; b = b[8:] {
				at, nr := binary.BigEndian.Uint32(b), binary.BigEndian.Uint32(b[4:])
				if nr > 0 && (k >= uint64(len(starts)) || starts[k] == 0 || starts[k] != at) {
					return fmt.Errorf("IEOT extension: a block of entries at byte %d, where entry %d does not begin", at, k)
				}
				k += uint64(nr)
			}
			if k != uint64(len(starts)) {
				return fmt.Errorf("IEOT extension: blocks of %d entries, the index has %d", k, len(starts))
			}
		}
	}
	for {
		k, err := r.Read(scratch)
		keep(scratch[:k])
		if err != nil {
			break
		}
	}
	// Git's EOIE: eoieSize+20 bytes (signature, size 24, offset, hash) just before
	// the checksum.
	if total >= uint64(eoieSize+20+hashSize) && total-entriesEnd >= uint64(eoieSize+20+hashSize) {
		e := tail[len(tail)-hashSize-(eoieSize+20):]
		if string(e[:4]) == "EOIE" && binary.BigEndian.Uint32(e[4:8]) == 24 {
			if walkedEOIE != total-uint64(hashSize)-(eoieSize+20) || uint64(eoieOffset) != entriesEnd {
				return errors.New("EOIE extension does not point where the entries end")
			}
		}
	}
	return nil
}

// indexVarint reads the offset encoding of an index v4 path prefix (Git's
// varint.c): seven bits a byte, most significant first, each continuation adding
// one.
func indexVarint(r *bufio.Reader) (v uint64, n int, err error) {
	c, err := r.ReadByte()
	if err != nil {
		return 0, 0, err
	}
	n = 1
	v = uint64(c & 0x7f)
	for c&0x80 != 0 {
		if c, err = r.ReadByte(); err != nil {
			return 0, 0, err
		}
		n++
		if v+1 > 1<<56 {
			return 0, 0, errors.New("overflow")
		}
		v = (v+1)<<7 | uint64(c&0x7f)
	}
	return v, n, nil
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
		if len(c) > 4 && (ntfsDotGit(c) || hfsDotGit(c)) {
			return true
		}
	}
	return false
}

// ntfsDotGit reports whether an NTFS volume takes component c for ".git", as Git's
// is_ntfs_dotgit does: ".git" or its short name "git~1", in any case, followed by
// nothing but dots and spaces (which Windows drops), up to a backslash or a colon
// (an alternate data stream). Git refuses such a path when it adds it
// (core.protectNTFS, on by default since 2.24.1), so no index Git wrote has one.
func ntfsDotGit(c []byte) bool {
	var rest []byte
	switch {
	case c[0] == '.' && bytes.EqualFold(c[1:4], []byte("git")):
		rest = c[4:]
	case len(c) >= 5 && bytes.EqualFold(c[:3], []byte("git")) && c[3] == '~' && c[4] == '1':
		rest = c[5:]
	default:
		return false
	}
	for _, b := range rest {
		switch b {
		case '\\', ':':
			return true
		case '.', ' ':
		default:
			return false
		}
	}
	return true
}

// hfsDotGit reports whether HFS+ (or a casefolding that skips ignorable code points) takes
// component c for ".git", as Git's is_hfs_dotgit does: ".git" in any case once the
// code points it ignores (U+200C–U+200F, U+202A–U+202E, U+206A–U+206F, U+FEFF) are
// left out.
func hfsDotGit(c []byte) bool {
	if c[0] != '.' && c[0] != 0xe2 && c[0] != 0xef {
		return false
	}
	var kept [4]byte
	n := 0
	for len(c) > 0 {
		r, size := utf8.DecodeRune(c)
		c = c[size:]
		switch {
		case r >= 0x200c && r <= 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x206a && r <= 0x206f, r == 0xfeff:
			continue
		case r >= utf8.RuneSelf || n == len(kept):
			return false
		}
		kept[n] = byte(r)
		n++
	}
	return n == 4 && kept[0] == '.' && bytes.EqualFold(kept[1:], []byte("git"))
}
