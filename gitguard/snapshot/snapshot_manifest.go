package snapshot

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/safepath"
)

// ManifestFormat is the version of the manifest and archive layout this agentbox
// writes and restores.
const ManifestFormat = 1

// maxManifest bounds what is read of a manifest: a real one is a few hundred bytes,
// and a hostile archive must not make agentbox read gigabytes.
const maxManifest = 64 << 10

// Manifest describes a snapshot: where the metadata came from and what HEAD was.
type Manifest struct {
	Format          int       `json:"format"`                // ManifestFormat
	Repo            string    `json:"repo"`                  // the work tree
	GitCommonDir    string    `json:"git_common_dir"`        // stored under git-common/
	GitDir          string    `json:"git_dir"`               // the work tree's gitdir; under git-worktree/ when it differs from GitCommonDir
	DotGitFile      string    `json:"dotgit_file,omitempty"` // repo/.git when it is a "gitdir:" pointer file, stored as dotgit
	Head            string    `json:"head"`                  // HEAD as written: "ref: refs/heads/main" or a commit id
	HeadCommit      string    `json:"head_commit,omitempty"` // the commit HEAD resolved to; empty for an unborn branch
	Time            time.Time `json:"time"`                  // when the snapshot was taken
	AgentboxVersion string    `json:"agentbox_version"`
}

// Linked reports whether the snapshot holds a separate worktree gitdir.
func (m *Manifest) Linked() bool { return m.GitDir != m.GitCommonDir }

// ReadManifest parses and validates a manifest. It reads at most 64 KiB.
func ReadManifest(r io.Reader) (*Manifest, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxManifest+1))
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	if len(b) > maxManifest {
		return nil, fmt.Errorf("manifest: larger than %d bytes", maxManifest)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	return &m, nil
}

func (m *Manifest) validate() error {
	if m.Format != ManifestFormat {
		return fmt.Errorf("format %d, this agentbox reads format %d", m.Format, ManifestFormat)
	}
	for _, f := range []struct {
		name, val string
		opt       bool
	}{
		{"repo", m.Repo, false},
		{"git_common_dir", m.GitCommonDir, false},
		{"git_dir", m.GitDir, false},
		{"dotgit_file", m.DotGitFile, true},
	} {
		if f.opt && f.val == "" {
			continue
		}
		// A newline is a legal (if unwise) character of a path: refusing it would
		// make a snapshot of such a repository unrestorable.
		if !filepath.IsAbs(f.val) || filepath.Clean(f.val) != f.val || strings.ContainsRune(f.val, 0) {
			return fmt.Errorf("%s %q: not a clean absolute path", f.name, f.val)
		}
	}
	if strings.ContainsAny(m.Head+m.HeadCommit+m.AgentboxVersion, "\x00\n") {
		return errors.New("head, head_commit or agentbox_version holds a control character")
	}
	if m.HeadCommit != "" && !((len(m.HeadCommit) == 40 || len(m.HeadCommit) == 64) && isHex(m.HeadCommit)) {
		return fmt.Errorf("head_commit %q: not a commit id", m.HeadCommit)
	}
	if m.Time.IsZero() {
		return errors.New("time: missing")
	}
	return nil
}

// writeManifestEntry writes manifest.json as the archive's first entry, stored, with
// its CRC and sizes in the local header (no data descriptor), so that
// readLeadingManifest can read it from the start of the file.
func writeManifestEntry(zw *zip.Writer, m *Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encode manifest: %w", err)
	}
	b = append(b, '\n')
	h := &zip.FileHeader{
		Name:               ManifestName,
		Method:             zip.Store,
		Extra:              extendedTimestamp(m.Time),
		CRC32:              crc32.ChecksumIEEE(b),
		CompressedSize64:   uint64(len(b)),
		UncompressedSize64: uint64(len(b)),
	}
	h.SetMode(0o600)
	w, err := zw.CreateRaw(h)
	if err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	return nil
}

// extendedTimestamp is the "UT" extra field holding mtime (Info-ZIP's extra.fld),
// which CreateRaw, unlike CreateHeader, does not add from FileHeader.Modified.
func extendedTimestamp(t time.Time) []byte {
	b := make([]byte, 9)
	binary.LittleEndian.PutUint16(b[0:], 0x5455)
	binary.LittleEndian.PutUint16(b[2:], 5)
	b[4] = 1 // mtime present
	binary.LittleEndian.PutUint32(b[5:], uint32(t.Unix()))
	return b
}

// The ZIP local file header (APPNOTE.TXT 4.3.7).
const (
	localHeaderSig = 0x04034b50
	localHeaderLen = 30
)

// readLeadingManifest reads the manifest from the first entry of a snapshot, as
// writeManifestEntry wrote it, without reading the central directory.
func readLeadingManifest(r io.ReaderAt) (*Manifest, error) {
	var h [localHeaderLen]byte
	if _, err := r.ReadAt(h[:], 0); err != nil {
		return nil, fmt.Errorf("read ZIP header: %w", err)
	}
	le := binary.LittleEndian
	if le.Uint32(h[0:]) != localHeaderSig {
		return nil, errors.New("not a ZIP file")
	}
	flags, method := le.Uint16(h[6:]), le.Uint16(h[8:])
	crc, csize, usize := le.Uint32(h[14:]), le.Uint32(h[18:]), le.Uint32(h[22:])
	nameLen, extraLen := int64(le.Uint16(h[26:])), int64(le.Uint16(h[28:]))
	if flags&0x8 != 0 || method != zip.Store || csize != usize || usize > maxManifest {
		return nil, errors.New("first entry is not a stored manifest")
	}
	name := make([]byte, nameLen)
	if _, err := r.ReadAt(name, localHeaderLen); err != nil {
		return nil, fmt.Errorf("read ZIP header: %w", err)
	}
	if string(name) != ManifestName {
		return nil, fmt.Errorf("first entry is %q, not %s", name, ManifestName)
	}
	data := make([]byte, usize)
	if _, err := r.ReadAt(data, localHeaderLen+nameLen+extraLen); err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	if crc32.ChecksumIEEE(data) != crc {
		return nil, errors.New("manifest: checksum mismatch")
	}
	return ReadManifest(bytes.NewReader(data))
}

// readManifestFile reads the leading manifest of the snapshot at path, which must be
// a regular file (a symlink is not followed, a FIFO does not block).
func readManifestFile(path string) (*Manifest, error) {
	f, err := safepath.OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readLeadingManifest(f)
}
