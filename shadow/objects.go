package shadow

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/adler32"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Commits and refs written in Go. A Git process's start-up is, on a small
// repository, most of what a record costs: a commit is one small loose
// object and a ref is one small file, so the recorder writes them itself, in the
// formats Git reads (gitformat-loose(5), gitrepository-layout(5)). The caller holds
// the store's lock, which every writer of the shadow repository takes; the ref is
// still written through Git's own lock file convention (REF.lock, then rename), so
// a Git process that would update it meanwhile fails rather than races.

// ident is the author and committer of every recorded commit (git.go's env).
const ident = "agentbox <agentbox@localhost>"

// writeCommit writes a commit of tree with parent ("" for none), the message as
// given, dated when, and returns its id.
func (s *Store) writeCommit(tree, parent, msg string, when time.Time) (string, error) {
	b, err := appendCommitHead(make([]byte, 0, commitHeadLen+len(msg)), tree, parent, when)
	if err != nil {
		return "", err
	}
	return s.writeObject("commit", append(b, msg...))
}

// commitHeadLen bounds the length of a commit's head (appendCommitHead): its tree,
// parent, author and committer lines and the empty line after them.
const commitHeadLen = 256

// appendCommitHead appends a commit's head, up to and with the empty line before
// its message: tree, parent ("" for none), author and committer, dated when (zero:
// now).
func appendCommitHead(b []byte, tree, parent string, when time.Time) ([]byte, error) {
	if !isHexID(tree) || parent != "" && !isHexID(parent) {
		return nil, fmt.Errorf("shadow: commit: bad object id")
	}
	if when.IsZero() {
		when = time.Now()
	}
	if when.Unix() < 0 {
		return nil, fmt.Errorf("shadow: commit: date %s before 1970", when)
	}
	b = append(append(append(b, "tree "...), tree...), '\n')
	if parent != "" {
		b = append(append(append(b, "parent "...), parent...), '\n')
	}
	for _, role := range []string{"author ", "committer "} {
		b = append(append(b, role...), ident+" "...)
		b = strconv.AppendInt(b, when.Unix(), 10)
		b = when.AppendFormat(append(b, ' '), "-0700")
		b = append(b, '\n')
	}
	return append(b, '\n'), nil
}

// writeObject stores body as a loose object of kind and returns its id. An object
// that exists already is left as it is.
func (s *Store) writeObject(kind string, body []byte) (string, error) {
	hdr, id := objectID(kind, body)
	if s.haveObject(id) {
		return id, nil
	}
	z, err := deflateObject(hdr, body)
	if err != nil {
		return "", fmt.Errorf("shadow: compress object: %w", err)
	}
	if err := s.putObject(id, z); err != nil {
		return "", err
	}
	return id, nil
}

// objectID returns a loose object's header and its id.
func objectID(kind string, body []byte) (hdr, id string) {
	hdr = kind + " " + strconv.Itoa(len(body)) + "\x00"
	h := sha1.New()
	h.Write([]byte(hdr))
	h.Write(body)
	return hdr, hex.EncodeToString(h.Sum(nil))
}

// haveObject says whether the loose object id is there.
func (s *Store) haveObject(id string) bool {
	var st unix.Stat_t
	return unix.Lstat(filepath.Join(s.Dir, "objects", id[:2], id[2:]), &st) == nil
}

// putObject writes z, the zlib stream of the object id, as its loose file.
func (s *Store) putObject(id string, z []byte) error {
	dir := filepath.Join(s.Dir, "objects", id[:2])
	final := filepath.Join(dir, id[2:])
	err := putLoose(dir, final, z)
	if errors.Is(err, fs.ErrNotExist) {
		// The fan-out directory is made on first use, not looked for each time.
		if err = os.MkdirAll(dir, 0o755); err == nil {
			err = putLoose(dir, final, z)
		}
	}
	if err != nil {
		return fmt.Errorf("shadow: write object %s: %w", id, err)
	}
	return nil
}

// putLoose writes z as the read-only file final in dir, which must exist: written
// whole into an unnamed file (O_TMPFILE) that is then linked at its name, so that
// no reader sees part of it, a killed recorder leaves no temporary file, and an
// object someone else linked meanwhile is not replaced. Where the filesystem has
// no unnamed files, or /proc/self/fd cannot link one, a named temporary file.
func putLoose(dir, final string, z []byte) error {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o444)
	if errors.Is(err, unix.ENOENT) {
		return err
	}
	if err != nil {
		return putLooseNamed(dir, final, z)
	}
	defer unix.Close(fd)
	// The umask may have taken bits: objects are 0444 as Git writes them.
	if err := unix.Fchmod(fd, 0o444); err != nil {
		return err
	}
	for b := z; len(b) > 0; {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	err = unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.AT_FDCWD, final, unix.AT_SYMLINK_FOLLOW)
	switch {
	case err == nil, errors.Is(err, unix.EEXIST):
		return nil
	case errors.Is(err, unix.ENOENT) && !procFD():
		return putLooseNamed(dir, final, z)
	}
	return err
}

// procFD reports whether /proc/self/fd is procfs's, through which an unnamed file
// can be linked.
func procFD() bool {
	var sfs unix.Statfs_t
	return unix.Statfs("/proc/self/fd", &sfs) == nil && sfs.Type == unix.PROC_SUPER_MAGIC
}

// putLooseNamed is putLoose through a named temporary file in dir.
func putLooseNamed(dir, final string, z []byte) error {
	tmp, err := os.CreateTemp(dir, "tmp_obj_")
	if err != nil {
		return err
	}
	_, err = tmp.Write(z)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o444)
	}
	if err == nil {
		// Link, not rename: an object someone else wrote meanwhile is not replaced.
		if err = os.Link(tmp.Name(), final); errors.Is(err, fs.ErrExist) {
			err = nil
		}
	}
	os.Remove(tmp.Name())
	return err
}

// storedMax is the largest object written as stored (uncompressed) deflate blocks.
// Most of what the recorder writes is a commit of a few KB of JSON, a tree or a
// source file: for them the compressor's state (hundreds of KB of fresh heap, paid
// for in page faults) costs more than the bytes it saves, and the next repack
// compresses them anyway. Larger objects are Huffman-coded.
const storedMax = 64 << 10

// deflateObject returns the zlib stream of a loose object: hdr followed by body.
func deflateObject(hdr string, body []byte) ([]byte, error) {
	if len(hdr)+len(body) <= storedMax {
		return storedZlib([]byte(hdr), body), nil
	}
	var z bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&z, zlib.HuffmanOnly)
	zw.Write([]byte(hdr))
	zw.Write(body)
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return z.Bytes(), nil
}

// storedZlib is a zlib stream (RFC 1950) of the parts, one after the other, in
// stored deflate blocks (RFC 1951 3.2.4: a header byte, LEN and its complement,
// then LEN bytes as they are), which every zlib reader inflates.
func storedZlib(parts ...[]byte) []byte {
	const maxBlock = 65535
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	out := make([]byte, 0, 2+5*(n/maxBlock+1)+n+4)
	out = append(out, 0x78, 0x01) // deflate, 32 KiB window, no dictionary
	sum := adler32.New()
	room := 0 // bytes the current block still takes
	block := func() {
		room = min(n, maxBlock)
		n -= room
		last := byte(0)
		if n == 0 {
			last = 1
		}
		out = append(out, last, byte(room), byte(room>>8), ^byte(room), ^byte(room>>8))
	}
	if n == 0 {
		block() // one empty final block
	}
	for _, p := range parts {
		sum.Write(p)
		for len(p) > 0 {
			if room == 0 {
				block()
			}
			k := min(room, len(p))
			out = append(out, p[:k]...)
			p, room = p[k:], room-k
		}
	}
	return binary.BigEndian.AppendUint32(out, sum.Sum32())
}

// setRef points ref at commit if it still points at old ("" means it must not exist
// yet), as `git update-ref ref commit old` does.
func (s *Store) setRef(ref, commit, old string) error {
	if !strings.HasPrefix(ref, "refs/") || strings.Contains(ref, "..") || !isHexID(commit) {
		return fmt.Errorf("shadow: update %s: bad ref or id", ref)
	}
	p := filepath.Join(s.Dir, filepath.FromSlash(ref))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("shadow: update %s: %w", ref, err)
	}
	lock := p + ".lock"
	f, err := os.OpenFile(lock, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("shadow: update %s: %w", ref, err)
	}
	fail := func(err error) error {
		f.Close()
		os.Remove(lock)
		return fmt.Errorf("shadow: update %s: %w", ref, err)
	}
	cur, err := s.readRef(ref)
	if err != nil {
		return fail(err)
	}
	if cur != old {
		return fail(fmt.Errorf("is at %q, expected %q", cur, old))
	}
	if _, err := f.WriteString(commit + "\n"); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(lock)
		return fmt.Errorf("shadow: update %s: %w", ref, err)
	}
	if err := os.Rename(lock, p); err != nil {
		os.Remove(lock)
		return fmt.Errorf("shadow: update %s: %w", ref, err)
	}
	return nil
}

// readRef returns the id ref points at, "" when it does not exist: its loose file,
// else its line in packed-refs.
func (s *Store) readRef(ref string) (string, error) {
	b, err := os.ReadFile(filepath.Join(s.Dir, filepath.FromSlash(ref)))
	if err == nil {
		id := strings.TrimSpace(string(b))
		if !isHexID(id) {
			return "", fmt.Errorf("ref %s holds %q, not an object id", ref, id)
		}
		return id, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	packed, err := os.ReadFile(filepath.Join(s.Dir, "packed-refs"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(string(packed), "\n") {
		if id, name, ok := strings.Cut(line, " "); ok && name == ref && isHexID(id) {
			return id, nil
		}
	}
	return "", nil
}

func isHexID(s string) bool {
	if len(s) != 40 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
