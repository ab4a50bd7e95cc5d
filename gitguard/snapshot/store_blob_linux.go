package snapshot

// The store's blobs: contents and trees, written once under their SHA-256.

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

func isBlobName(s string) bool { return len(s) == 64 && isHex(s) }

func (rs *repoStore) blobPath(h string) string {
	return filepath.Join(rs.dir, "blobs", h[:2], h[2:])
}

// haveBlob reports whether the blob h is in the store with size bytes (-1: any).
func (rs *repoStore) haveBlob(h string, size int64) bool {
	var st unix.Stat_t
	if err := unix.Fstatat(unix.AT_FDCWD, rs.blobPath(h), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFREG && (size < 0 || st.Size == size)
}

// putBytes stores b (a tree) and returns its name.
func (rs *repoStore) putBytes(b []byte) (string, error) {
	sum := sha256.Sum256(b)
	h := hex.EncodeToString(sum[:])
	if rs.haveBlob(h, int64(len(b))) {
		return h, nil
	}
	rs.treeBytes += int64(len(b))
	return h, rs.publishBlob(h, func(w io.Writer) error { _, err := w.Write(b); return err })
}

// publishBlob writes a blob through a temporary file; fill writes its content. A
// blob that appeared meanwhile (same name: same content) is kept.
func (rs *repoStore) publishBlob(h string, fill func(io.Writer) error) error {
	sub := filepath.Join(rs.dir, "blobs", h[:2])
	if err := os.Mkdir(sub, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create %s: %w", sub, err)
	}
	tmp, err := os.CreateTemp(sub, ".tmp-*")
	if err != nil {
		return fmt.Errorf("store a blob in %s: %w", sub, err)
	}
	err = fill(tmp)
	if err == nil {
		err = tmp.Chmod(0o400)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp.Name(), rs.blobPath(h))
		if errors.Is(err, fs.ErrExist) {
			err = nil
		} else if err == nil {
			rs.written = append(rs.written, rs.blobPath(h))
		}
	}
	os.Remove(tmp.Name())
	if err != nil {
		return fmt.Errorf("store a blob in %s: %w", sub, err)
	}
	return nil
}

// hashWriter copies into the temporary blob while hashing.
type hashWriter struct {
	w io.Writer
	h interface {
		io.Writer
		Sum([]byte) []byte
	}
	p *progress
}

func (hw *hashWriter) Write(p []byte) (int, error) {
	hw.h.Write(p)
	hw.p.add(int64(len(p)))
	return hw.w.Write(p)
}

// putFile stores the content of the open regular file f (size bytes) and returns its
// blob. The content is read once: hashed while copied to a temporary blob, which is
// then given its name.
func (rs *repoStore) putFile(f *os.File, src string, size int64, buf []byte) (string, error) {
	sub := filepath.Join(rs.dir, "blobs")
	tmp, err := os.CreateTemp(sub, ".tmp-*")
	if err != nil {
		return "", fmt.Errorf("store %s: %w", src, err)
	}
	defer os.Remove(tmp.Name())
	hw := &hashWriter{w: &writeback{f: tmp}, h: sha256.New(), p: rs.progress}
	n, err := io.CopyBuffer(hw, io.LimitReader(f, size), buf)
	if err != nil {
		tmp.Close()
		return "", fmt.Errorf("copy %s: %w", src, err)
	}
	if n != size {
		// Shrunk while read: store what was read (the stat cache will not match
		// it next time).
		size = n
	}
	if err := tmp.Chmod(0o400); err != nil {
		tmp.Close()
		return "", fmt.Errorf("store %s: %w", src, err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("store %s: %w", src, err)
	}
	h := hex.EncodeToString(hw.h.Sum(nil))
	if rs.haveBlob(h, size) {
		return h, nil
	}
	if err := os.Mkdir(filepath.Join(sub, h[:2]), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("store %s: %w", src, err)
	}
	// A blob of this name that is not what its name says (haveBlob checked the
	// size) is replaced: the temporary file's content was hashed on the way in.
	_, lerr := os.Lstat(rs.blobPath(h))
	if err := os.Rename(tmp.Name(), rs.blobPath(h)); err != nil {
		return "", fmt.Errorf("store %s: %w", src, err)
	}
	if lerr != nil {
		rs.written = append(rs.written, rs.blobPath(h))
	}
	rs.newBytes += size
	return h, nil
}
