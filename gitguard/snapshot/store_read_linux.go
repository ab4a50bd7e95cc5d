package snapshot

// Reading records, blobs and trees back, bounded.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
)

// maxTree bounds a tree blob read back, with room for a directory of a million
// loose objects.
const maxTree = 512 << 20

// maxRecord bounds a record read back.
const maxRecord = 1 << 20

func readRecord(p string) (*Record, error) {
	b, err := readBounded(p, maxRecord)
	if err != nil {
		return nil, err
	}
	var rec Record
	if err := unmarshalRecord(b, &rec); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if rec.StoreFormat != StoreFormat {
		return nil, fmt.Errorf("%s: store format %d, this agentbox reads %d", p, rec.StoreFormat, StoreFormat)
	}
	if err := rec.Manifest.validate(); err != nil {
		return nil, fmt.Errorf("%s: manifest: %w", p, err)
	}
	for _, h := range []string{rec.Common, rec.Worktree, rec.DotGit} {
		if h != "" && !isBlobName(h) {
			return nil, fmt.Errorf("%s: %q is not a blob name", p, h)
		}
	}
	if rec.Common == "" {
		return nil, fmt.Errorf("%s: no tree of the common dir", p)
	}
	return &rec, nil
}

// readBlob reads a blob of at most max bytes and checks it against its name.
func (rs *repoStore) readBlob(h string, max int64) ([]byte, error) {
	b, err := readBounded(rs.blobPath(h), max)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("blob %s is missing from the store", h)
	}
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", h, err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != h {
		return nil, fmt.Errorf("blob %s: content changed (its SHA-256 is %x)", h, sum)
	}
	return b, nil
}

// parseTree reads a tree blob; any line it cannot read is an error.
func parseTree(b []byte) ([]treeEntry, error) {
	var out []treeEntry
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return nil, errors.New("unterminated line")
		}
		line := string(b[:i])
		b = b[i+1:]
		f := strings.SplitN(line, " ", 5)
		if len(f) != 5 || len(f[0]) != 1 {
			return nil, fmt.Errorf("bad line %q", line)
		}
		e := treeEntry{kind: f[0][0]}
		mode, err1 := strconv.ParseUint(f[1], 8, 32)
		mt, err2 := strconv.ParseInt(f[2], 10, 64)
		sz, err3 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || sz < 0 || mode > 0o777 {
			return nil, fmt.Errorf("bad line %q", line)
		}
		e.mode, e.mtime, e.size = uint32(mode), mt, sz
		rest := f[4]
		var ref string
		switch e.kind {
		case 'f', 'd':
			ref, rest, _ = strings.Cut(rest, " ")
			if !isBlobName(ref) {
				return nil, fmt.Errorf("bad reference in %q", line)
			}
		case 'l':
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return nil, fmt.Errorf("bad link target in %q", line)
			}
			ref, _ = strconv.Unquote(q)
			rest = strings.TrimPrefix(rest[len(q):], " ")
		default:
			return nil, fmt.Errorf("unknown kind in %q", line)
		}
		name, err := strconv.Unquote(rest)
		if err != nil {
			return nil, fmt.Errorf("bad name in %q", line)
		}
		e.ref, e.name = ref, name
		out = append(out, e)
	}
	return out, nil
}
