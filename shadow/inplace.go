package shadow

import (
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
	"github.com/agentbox/agentbox/internal/treewalk"
)

// Staging files changed in place without `git add` (docs/promises.md P13: a session
// that changed ten files costs what ten files cost). `git add` of ten paths reads and
// rewrites the whole shadow index, whose cost grows with the tree. When every path
// changedPaths named is a tracked regular file, still a regular file — an agent
// editing files — stageInPlace does what that `git add` would: it stores each file's
// blob and rewrites the index with the file's stat data and blob, the cache-tree
// entries of its directories invalidated (`write-tree` then rebuilds only those, as
// after a `git add`).
//
// What Git would do that matters, done the same:
//   - the blob is the file's bytes: info/attributes unsets every filter and
//     conversion, and agentbox's config sets no autocrlf;
//   - the mode is 100755 when the owner may execute, else 100644 (core.filemode);
//   - the stat data are the file's as fstat'ed before its content was read, and the
//     file is fstat'ed again after: a file that changed meanwhile is left to Git;
//   - stageState.Added is read before the first fstat, as before `git add`'s first
//     lstat (changed.go relies on it);
//   - an entry racily clean against the new index (its mtime at or after the
//     index file's) is checked by content by the next Git that reads it, as Git
//     does with its own;
//   - the index is written to index.lock and renamed over the index, under the
//     store's lock, with its trailing SHA-1.
//
// It gives up, and `git add` runs as before, on anything else: a path that is not a
// stage-0 regular-file entry of the index or not a regular file in the tree, a name
// Git reads for other paths (.gitignore, .gitattributes, .gitmodules), a file larger
// than maxInPlaceSize, an index Git would read otherwise (not version 2 or 3, an
// extended-flags entry among the paths, an extension other than TREE, a bad
// checksum — checked whenever the entries' layout is read from the index itself,
// that is for any index file the kept layout does not name, layout.go), or more
// than maxInPlacePaths paths.

const (
	maxInPlacePaths = 256
	maxInPlaceSize  = 4 << 20
)

// errNotInPlace: stageInPlace cannot stage these paths; `git add` must.
var errNotInPlace = errors.New("not a change in place")

// stageInPlace stages paths (changedPaths' output) into the index without Git, and
// returns the index's tree ("" when the index has no cache tree: write-tree must
// make it) and how many entries it changed (blob or mode), or returns errNotInPlace
// having changed nothing.
func (s *Store) stageInPlace(paths []string) (tree string, changed int, err error) {
	tree, changed, err = s.stageInPlaceTree(paths)
	if err != nil {
		return "", 0, errNotInPlace
	}
	return tree, changed, nil
}

// takeEntries finds the entries of paths by binary search and copies each into
// x.patched, to be written over; it returns their numbers, in the order of paths.
// An entry Git must handle (extended flags, a stage other than 0, assume-valid, a
// mode other than a regular file's), a missing or a repeated one: false.
func (x indexEntries) takeEntries(body []byte, paths []string) ([]int, bool) {
	at := make([]int, len(paths))
	for j, p := range paths {
		i, ok := findEntry(x, p)
		if !ok {
			return nil, false
		}
		e := body[x.off[i]:]
		flags := binary.BigEndian.Uint16(e[60:62])
		mode := binary.BigEndian.Uint32(e[24:28])
		if flags&0xf000 != 0 || mode != 0o100644 && mode != 0o100755 {
			return nil, false
		}
		if _, dup := x.patched[i]; dup {
			return nil, false
		}
		x.patched[i] = append([]byte(nil), e[:62]...)
		at[j] = i
	}
	return at, true
}

// invalidCacheTree reads the index's extensions from off: only the cache tree may
// be there, whose entries above paths go invalid (nil: no cache tree). Any other
// extension: false.
func invalidCacheTree(body []byte, off int, paths []string) (*ctNode, bool) {
	var ct *ctNode
	for e := off; e < len(body); {
		if e+8 > len(body) {
			return nil, false
		}
		size := int(binary.BigEndian.Uint32(body[e+4 : e+8]))
		if string(body[e:e+4]) != "TREE" || e+8+size > len(body) || ct != nil {
			return nil, false
		}
		var err error
		if ct, err = parseCacheTree(body[e+8 : e+8+size]); err != nil {
			return nil, false
		}
		for _, p := range paths {
			if !ct.invalidate(parent(p)) {
				return nil, false
			}
		}
		e += 8 + size
	}
	return ct, true
}

func (s *Store) stageInPlaceTree(paths []string) (string, int, error) {
	if len(paths) == 0 || len(paths) > maxInPlacePaths {
		return "", 0, errNotInPlace
	}
	for _, p := range paths {
		switch path.Base(p) {
		case ".gitignore", ".gitattributes", ".gitmodules":
			return "", 0, errNotInPlace
		}
	}
	indexPath := filepath.Join(s.Dir, "index")
	ix, err := openIndex(indexPath)
	if err != nil {
		return "", 0, errNotInPlace
	}
	// Nothing reads the mappings (the index's, the layout's offsets) once this
	// returns (the checksum's goroutine is waited for on every path), so unmapping
	// them and closing the index's file are left to a goroutine, off the record's
	// end: an unmap costs a TLB shootdown.
	hashed := make(chan struct{})
	hashing := false
	releaseLayout := func() {}
	defer func() {
		if hashing {
			<-hashed
		}
		go func() {
			ix.close()
			releaseLayout()
		}()
	}()
	b, before := ix.b, ix.st
	l, release, err := s.indexLayout(b, &before)
	releaseLayout = release
	if err != nil {
		return "", 0, errNotInPlace
	}
	body, off, offsets := b[:len(b)-20], l.ext, l.offsets
	x := indexEntries{b: b, off: offsets, patched: make(map[int][]byte, len(paths))}
	at, ok := x.takeEntries(body, paths)
	if !ok {
		return "", 0, errNotInPlace
	}
	ct, ok := invalidCacheTree(body, off, paths)
	if !ok {
		return "", 0, errNotInPlace
	}
	// The new index's unchanged bytes are copied from here on, beside the blobs,
	// the trees and the checksum; what is written over them waits for those.
	// (Deferred after ix's release, so run before it: the copy reads ix's file.)
	newIndex, err := startIndexCopy(indexPath, ix, off)
	if err != nil {
		return "", 0, errNotInPlace
	}
	defer newIndex.abort()
	// The blobs and trees are written beside the rest, and all of them before
	// the new index, which names them, replaces the old one.
	objs := s.startObjectWriter()
	defer objs.wait()
	added := treewalk.Now() // before the first fstat (changed.go)
	changed, recent, err := s.patchBlobs(paths, at, x, objs)
	if err != nil {
		return "", 0, errNotInPlace
	}
	// The new index: the old one's bytes up to the extensions, the patched
	// entries written over theirs, then the extension and the checksum of it all.
	// The entries are final here, so their part of the checksum is taken beside
	// the trees' writing, which only reads them.
	patches := make([]indexPatch, 0, len(at))
	for _, i := range at {
		patches = append(patches, indexPatch{off: int(offsets[i]), data: x.patched[i]})
	}
	slices.SortFunc(patches, func(a, b indexPatch) int { return a.off - b.off })
	h := sha1.New()
	hashing = true
	go func() {
		defer close(hashed)
		hashEntries(h, body[:off], patches)
	}()
	// The trees of the invalid cache-tree entries, as write-tree would write them;
	// then the extension and the checksum, written after the entries.
	rootTree := ""
	var ext []byte
	if ct != nil {
		root, err := s.build(ct, x, 0, len(offsets), "", &treeBufs{objs: objs})
		if err != nil {
			return "", 0, errNotInPlace
		}
		rootTree = hex.EncodeToString(root)
		tree := appendCacheTree(nil, ct)
		ext = append(binary.BigEndian.AppendUint32([]byte("TREE"), uint32(len(tree))), tree...)
	}
	<-hashed
	h.Write(ext)
	ext = h.Sum(ext)
	if objs.wait() != nil {
		return "", 0, errNotInPlace
	}
	// The index file keeps its mtime (racy.go): entries racy before stay racy.
	if err := newIndex.finish(indexPath, before.Mtim, patches, ext); err != nil {
		return "", 0, errNotInPlace // the index is as it was: Git stages instead
	}
	s.relabelLayout(indexKey(b, &before), ext[len(ext)-20:])
	s.addedClock = added
	s.recent = recent
	s.inPlace++
	return rootTree, changed, nil
}

// patchBlobs reads each of paths, has its blob written by objs and patches its
// entry (x.patched[at[j]]) with it and the file's stat data; it returns how many
// entries changed blob or mode, and the entries as stageState.Recent keeps them.
func (s *Store) patchBlobs(paths []string, at []int, x indexEntries, objs *objectWriter) (int, []recentEntry, error) {
	repoFd, err := unix.Open(s.Repo, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, nil, err
	}
	defer unix.Close(repoFd)
	changed := 0
	recent := make([]recentEntry, 0, len(paths))
	for j, p := range paths {
		var st unix.Stat_t
		content, err := readInPlace(repoFd, p, &st)
		if err != nil {
			return 0, nil, err
		}
		id, err := objs.put("blob", content)
		if err != nil {
			return 0, nil, err
		}
		mode, moved := patchEntry(x.patched[at[j]], &st, id)
		if moved {
			changed++
		}
		recent = append(recent, recentEntry{Path: p, Ctime: int64(uint32(st.Ctim.Sec))*1_000_000_000 + int64(uint32(st.Ctim.Nsec)),
			Ino: uint32(st.Ino), Mode: mode, Size: uint32(st.Size), OID: id})
	}
	return changed, recent, nil
}

// patchEntry writes into the entry e (its first 62 bytes) the file's stat data st
// and its blob id, as Git's add would, and returns the entry's mode and whether its
// blob or mode changed.
func patchEntry(e []byte, st *unix.Stat_t, id string) (mode uint32, changed bool) {
	oid, _ := hex.DecodeString(id)
	put := func(o int, v uint32) { binary.BigEndian.PutUint32(e[o:o+4], v) }
	put(0, uint32(st.Ctim.Sec))
	put(4, uint32(st.Ctim.Nsec))
	put(8, uint32(st.Mtim.Sec))
	put(12, uint32(st.Mtim.Nsec))
	put(16, uint32(st.Dev))
	put(20, uint32(st.Ino))
	mode = 0o100644
	if st.Mode&0o100 != 0 {
		mode = 0o100755
	}
	changed = binary.BigEndian.Uint32(e[24:28]) != mode || !bytes.Equal(e[40:60], oid)
	put(24, mode)
	put(28, st.Uid)
	put(32, st.Gid)
	put(36, uint32(st.Size))
	copy(e[40:60], oid)
	return mode, changed
}

// hashEntries writes into h the index's bytes up to its extensions, entries, with
// each patch's bytes in place of the entry bytes it covers (patches sorted by
// offset, not overlapping).
func hashEntries(h hash.Hash, entries []byte, patches []indexPatch) {
	prev := 0
	for _, p := range patches {
		h.Write(entries[prev:p.off])
		h.Write(p.data)
		prev = p.off + len(p.data)
	}
	h.Write(entries[prev:])
}

// readInPlace reads the regular file rel below repoFd, never following a symlink or
// blocking, into memory, with its fstat in st: an error for anything but a regular
// file of at most maxInPlaceSize that did not change while it was read.
func readInPlace(repoFd int, rel string, st *unix.Stat_t) ([]byte, error) {
	fd, err := safepath.OpenBeneath(repoFd, rel, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd) // not an os.File: the runtime's poller has nothing to do with a regular file
	if err := unix.Fstat(fd, st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size > maxInPlaceSize {
		return nil, errNotInPlace
	}
	// One byte more than its size: a file that grew is not read as its first bytes.
	buf := make([]byte, st.Size+1)
	n := 0
	for n < len(buf) {
		k, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, errNotInPlace
		}
		if k == 0 {
			break
		}
		n += k
	}
	if int64(n) != st.Size {
		return nil, errNotInPlace
	}
	var after unix.Stat_t
	if err := unix.Fstat(fd, &after); err != nil || after.Ino != st.Ino || after.Size != st.Size ||
		after.Mtim != st.Mtim || after.Ctim != st.Ctim || after.Mode != st.Mode {
		return nil, errNotInPlace
	}
	return buf[:n], nil
}

// ctNode is one entry of the index's cache-tree extension (Git's
// index-format.txt): a directory, how many index entries its tree covers (-1:
// invalid), its tree id when valid, and its subdirectories' entries.
type ctNode struct {
	name     string
	entries  int
	oid      []byte
	children []*ctNode
}

// parseCacheTree reads the cache-tree extension's data: for each entry, in
// pre-order, its path component NUL, the entry count and the subtree count in
// ASCII separated by a space and ended by LF, then the tree id when the count is
// not -1.
func parseCacheTree(data []byte) (*ctNode, error) {
	var node func(depth int) (*ctNode, error)
	node = func(depth int) (*ctNode, error) {
		nul := bytes.IndexByte(data, 0)
		if depth > 4096 || nul < 0 {
			return nil, errNotInPlace
		}
		n := &ctNode{name: string(data[:nul])}
		data = data[nul+1:]
		lf := bytes.IndexByte(data, '\n')
		if lf < 0 {
			return nil, errNotInPlace
		}
		count, sub, ok := bytes.Cut(data[:lf], []byte{' '})
		data = data[lf+1:]
		var err1, err2 error
		n.entries, err1 = strconv.Atoi(string(count))
		subtrees, err2 := strconv.Atoi(string(sub))
		if !ok || err1 != nil || err2 != nil || subtrees < 0 || n.entries < -1 || subtrees > len(data) {
			return nil, errNotInPlace
		}
		if n.entries >= 0 {
			if len(data) < 20 {
				return nil, errNotInPlace
			}
			n.oid, data = data[:20], data[20:]
		}
		for range subtrees {
			c, err := node(depth + 1)
			if err != nil {
				return nil, err
			}
			n.children = append(n.children, c)
		}
		return n, nil
	}
	root, err := node(0)
	if err != nil || len(data) != 0 || root.name != "" {
		return nil, errNotInPlace
	}
	return root, nil
}

// appendCacheTree writes n as parseCacheTree reads it.
func appendCacheTree(out []byte, n *ctNode) []byte {
	out = append(out, n.name...)
	out = append(out, 0)
	out = append(out, strconv.Itoa(n.entries)+" "+strconv.Itoa(len(n.children))+"\n"...)
	if n.entries >= 0 {
		out = append(out, n.oid...)
	}
	for _, c := range n.children {
		out = appendCacheTree(out, c)
	}
	return out
}

// invalidate marks the entries of dir ('/'-separated, "" the top) and of every
// directory above it invalid, as Git's cache_tree_invalidate_path does; false when
// the cache tree has no entry for one of them.
func (n *ctNode) invalidate(dir string) bool {
	n.entries, n.oid = -1, nil
	if dir == "" {
		return true
	}
	first, rest, _ := strings.Cut(dir, "/")
	for _, c := range n.children {
		if c.name == first {
			return c.invalidate(rest)
		}
	}
	return false
}

// indexEntries are the offsets of an index's entries in its bytes, in index order,
// and the entries a staging changed (their first 62 bytes, by entry number), which
// read in place of the bytes' own.
type indexEntries struct {
	b       []byte
	off     []uint32
	patched map[int][]byte
}

// entry returns the i-th entry's bytes, from its stat data on.
func (x indexEntries) entry(i int) []byte {
	if e, ok := x.patched[i]; ok {
		return e
	}
	return x.b[x.off[i]:]
}

// path returns the i-th entry's name (all that follows, if no NUL ends it: an
// offset that is no entry's, which findEntry's check refuses).
func (x indexEntries) path(i int) []byte {
	off := int(x.off[i])
	fixed := 62
	if binary.BigEndian.Uint16(x.b[off+60:off+62])&0x4000 != 0 {
		fixed += 2
	}
	p := x.b[min(off+fixed, len(x.b)):]
	if nul := bytes.IndexByte(p, 0); nul >= 0 {
		return p[:nul]
	}
	return p
}

// build writes the trees of n and of its invalid subtrees from the index entries
// [lo, hi), which are those below prefix ("" or "dir/"), as Git's write-tree
// would: each entry in index order (which is Git's tree order), a subdirectory as
// its tree. It returns n's tree id. bufs lends it the buffer of its depth.
func (s *Store) build(n *ctNode, x indexEntries, lo, hi int, prefix string, bufs *treeBufs) ([]byte, error) {
	tree := bufs.take()
	defer func() { bufs.give(tree) }()
	var byName map[string]*ctNode
	nchild := 0
	for i := lo; i < hi; {
		p := x.path(i)
		if !bytes.HasPrefix(p, []byte(prefix)) {
			return nil, errNotInPlace
		}
		rel := p[len(prefix):]
		slash := bytes.IndexByte(rel, '/')
		if slash < 0 {
			e := x.entry(i)
			mode := binary.BigEndian.Uint32(e[24:28])
			if binary.BigEndian.Uint16(e[60:62])&0x3000 != 0 {
				return nil, errNotInPlace
			}
			switch mode {
			case 0o100644, 0o100755, 0o120000, 0o160000:
			default:
				return nil, errNotInPlace
			}
			tree = append(tree, strconv.FormatUint(uint64(mode), 8)+" "...)
			tree = append(tree, rel...)
			tree = append(tree, 0)
			tree = append(tree, e[40:60]...)
			i++
			continue
		}
		name := string(rel[:slash])
		sub := prefix + name + "/"
		// The cache tree keeps a directory's subdirectories in its own order
		// (shorter names first): found by name.
		if byName == nil {
			byName = make(map[string]*ctNode, len(n.children))
			for _, k := range n.children {
				byName[k.name] = k
			}
		}
		c := byName[name]
		if c == nil {
			return nil, errNotInPlace
		}
		// Each subtree once: a name met again is an index out of order, whose
		// tree would name the directory twice.
		delete(byName, name)
		nchild++
		var j int
		if c.entries >= 0 {
			// A valid subtree covers c.entries entries: skipped by count, not
			// walked name by name (the top of a 100,000-file tree), and checked
			// at both ends.
			j = i + c.entries
			if c.entries == 0 || j > hi || !bytes.HasPrefix(x.path(j-1), []byte(sub)) ||
				j < hi && bytes.HasPrefix(x.path(j), []byte(sub)) {
				return nil, errNotInPlace
			}
		} else {
			// Where its entries end, by binary search: the index is sorted by
			// name, so the names below sub are one run from i. Walked name by
			// name, the run was the whole index when one directory holds the
			// tree (src/ of a 20,000-file tree: 20,000 names read on the
			// record's end for ten edits). Whatever the order, the search ends
			// on a name outside sub after one inside it, and the recursion
			// refuses a name in [i, j) outside sub; one below sub past j comes
			// back here as a second subtree of that name, refused above.
			below := []byte(sub)
			j = i + 1 + sort.Search(hi-i-1, func(k int) bool { return !bytes.HasPrefix(x.path(i+1+k), below) })
			if _, err := s.build(c, x, i, j, sub, bufs); err != nil {
				return nil, err
			}
		}
		tree = append(tree, "40000 "+name...)
		tree = append(tree, 0)
		tree = append(tree, c.oid...)
		i = j
	}
	if nchild != len(n.children) {
		return nil, errNotInPlace
	}
	id, err := bufs.objs.put("tree", tree) // which keeps no reference to tree
	if err != nil {
		return nil, err
	}
	n.oid, _ = hex.DecodeString(id)
	n.entries = hi - lo
	return n.oid, nil
}

// treeBufs are the buffers build writes trees into, one per depth of the
// recursion: the trees of sibling directories are written one after the other,
// so each reuses the memory of the one before instead of growing a new buffer
// (the launcher runs with its collector paused, so every new buffer is fresh
// pages).
type treeBufs struct {
	free  [][]byte
	depth int
	objs  *objectWriter // writes the trees
}

// take lends the buffer of the next depth, empty.
func (b *treeBufs) take() []byte {
	b.depth++
	if b.depth > len(b.free) {
		b.free = append(b.free, nil)
	}
	return b.free[b.depth-1][:0]
}

// give takes back the buffer take lent, grown or not.
func (b *treeBufs) give(buf []byte) {
	b.depth--
	b.free[b.depth] = buf
}
