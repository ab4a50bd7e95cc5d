package agentcfg

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
)

// errNotKeyByKey: the file could not be rewritten with only its offending keys put
// back; the caller puts it back whole.
var errNotKeyByKey = errors.New("cannot be rewritten key by key")

// putBack keeps the session's version aside and puts the baseline in its place
// (nothing, when there was no file before, or when it was too large to keep).
func (b *Baseline) putBack(base, cur *fileState) (string, error) {
	if !cur.exists {
		return "", b.restore(base)
	}
	if b.inPlace(base.path, cur) {
		return b.rewrite(base.path, cur.data, base.data, base.mode)
	}
	dir, name := filepath.Split(base.path)
	dfd, err := safepath.Open(filepath.Clean(dir), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return "", err
	}
	defer unix.Close(dfd)
	moved, err := b.moveAside(dfd, filepath.Clean(dir), name, cur)
	if err != nil {
		return "", err
	}
	switch {
	case base.exists && base.odd == "":
		err = writeAt(dfd, name, base.data, base.mode)
	case base.link != "":
		err = unix.Symlinkat(base.link, dfd, name)
	}
	return moved, err
}

// restore writes back a file the session removed (its content, or the user's
// symlink), making the directories the session removed on the way, 0700, below
// the kept path that holds it; never following a symlink.
func (b *Baseline) restore(base *fileState) error {
	dir, name := filepath.Split(base.path)
	dir = filepath.Clean(dir)
	dfd, err := safepath.Open(dir, unix.O_PATH|unix.O_DIRECTORY)
	if errors.Is(err, unix.ENOENT) {
		dfd, err = b.makeDir(dir)
	}
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if base.link != "" {
		return unix.Symlinkat(base.link, dfd, name)
	}
	return writeAt(dfd, name, base.data, base.mode)
}

// makeDir makes dir and its missing parents below the kept path that holds it.
func (b *Baseline) makeDir(dir string) (int, error) {
	for _, k := range b.opt.Kept {
		if within(dir, k) && dir != k {
			kfd, err := safepath.Open(k, unix.O_PATH|unix.O_DIRECTORY)
			if err != nil {
				return -1, err
			}
			defer unix.Close(kfd)
			return safepath.MkdirAll(kfd, strings.TrimPrefix(dir, k+"/"), 0o700)
		}
	}
	return -1, unix.ENOENT
}

// inPlace: the file is itself a kept path, bound by inode into every live session
// that keeps it; it is rewritten in place, so that they keep seeing the host's.
func (b *Baseline) inPlace(path string, cur *fileState) bool {
	if cur.odd != "" {
		return false
	}
	for _, k := range b.opt.Kept {
		if k == path {
			return true
		}
	}
	return false
}

// putBackKeys keeps a copy of the session's file and rewrites the file with the
// offending keys as they were in the baseline (absent when they were): JSON with
// Go's encoder, TOML with BurntSushi's (comments and layout are lost, values
// kept). The rewritten file is read again: when it still differs from the
// baseline in an exec-shaped key, or a TOML file does not decode back to what was
// meant, errNotKeyByKey.
func (b *Baseline) putBackKeys(base, cur *fileState, keys []Finding) (string, error) {
	var fixed []byte
	var err error
	if cur.f == codexConfig || cur.f == tomlDoc {
		fixed, err = fixTOML(base, cur, keys)
	} else {
		fixed, err = fixJSON(base, cur, keys)
	}
	if err != nil {
		return "", errNotKeyByKey
	}
	if es, ok := entries(cur.f, fixed, b.opt.Repo); !ok || len(changedKeys(base, &fileState{path: cur.path, entries: es})) > 0 {
		return "", errNotKeyByKey
	}
	mode := cur.mode
	if base.exists {
		mode = base.mode
	}
	if b.inPlace(base.path, cur) {
		return b.rewrite(base.path, cur.data, fixed, mode)
	}
	dir, name := filepath.Split(base.path)
	dfd, err := safepath.Open(filepath.Clean(dir), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return "", err
	}
	defer unix.Close(dfd)
	aside, err := b.keepCopy(dfd, filepath.Clean(dir), name, cur.data)
	if err != nil {
		return "", err
	}
	tmp := name + ".agentbox-tmp-" + b.opt.ID
	if err := writeAt(dfd, tmp, fixed, mode); err != nil {
		return aside, err
	}
	if err := unix.Renameat(dfd, tmp, dfd, name); err != nil {
		unix.Unlinkat(dfd, tmp, 0)
		return aside, err
	}
	return aside, nil
}

func fixJSON(base, cur *fileState, keys []Finding) ([]byte, error) {
	v, ok := decodeJSON(cur.data)
	doc, _ := v.(map[string]any)
	if !ok || doc == nil {
		doc = map[string]any{}
	}
	for _, k := range keys {
		old, had := base.entries[k.Key]
		var v any
		if had {
			v, _ = decodeJSON([]byte(old.value))
		}
		setPath(doc, keyPath(base, cur, k.Key), v, had)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	err := enc.Encode(doc)
	return buf.Bytes(), err
}

func fixTOML(base, cur *fileState, keys []Finding) ([]byte, error) {
	var doc, old map[string]any
	if err := decodeTOML(cur.data, &doc); err != nil {
		return nil, err
	}
	if doc == nil {
		doc = map[string]any{}
	}
	if base.exists && base.odd == "" {
		if err := decodeTOML(base.data, &old); err != nil {
			return nil, err
		}
	}
	for _, k := range keys {
		p := keyPath(base, cur, k.Key)
		v, had := getPath(old, p)
		setPath(doc, p, v, had)
	}
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(doc); err != nil {
		return nil, err
	}
	var back map[string]any
	if _, err := toml.Decode(buf.String(), &back); err != nil {
		return nil, err
	}
	if back == nil {
		back = map[string]any{}
	}
	if !reflect.DeepEqual(back, doc) {
		return nil, errNotKeyByKey
	}
	return buf.Bytes(), nil
}

// getPath is the value at path in doc, and whether there is one.
func getPath(doc map[string]any, path []string) (any, bool) {
	var v any = doc
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[p]; !ok {
			return nil, false
		}
	}
	return v, true
}

// setPath sets (or, when !present, deletes) the value at path in doc.
func setPath(doc map[string]any, path []string, v any, present bool) {
	m := doc
	for _, p := range path[:len(path)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			if !present {
				return
			}
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	last := path[len(path)-1]
	if present {
		m[last] = v
	} else {
		delete(m, last)
	}
}

// rewrite keeps session (the file's current content) and writes fixed into the
// file's own inode, with the permission bits mode (when not 0).
func (b *Baseline) rewrite(path string, session, fixed []byte, mode uint32) (string, error) {
	dir, name := filepath.Split(path)
	dfd, err := safepath.Open(filepath.Clean(dir), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return "", err
	}
	defer unix.Close(dfd)
	aside, err := b.keepCopy(dfd, filepath.Clean(dir), name, session)
	if err != nil {
		return "", err
	}
	fd, err := safepath.OpenBeneath(dfd, name, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return aside, err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return aside, errors.New("not a regular file any more")
	}
	if err := f.Truncate(0); err != nil {
		return aside, err
	}
	if _, err := f.WriteAt(fixed, 0); err != nil {
		return aside, err
	}
	if mode != 0 {
		return aside, f.Chmod(os.FileMode(mode))
	}
	return aside, nil
}

// quarantineDir opens Quarantine/ID/DIR, created 0700 when missing; -1 when there
// is no quarantine directory or it cannot be made.
func (b *Baseline) quarantineDir(dir string) (int, string) {
	if b.opt.Quarantine == "" || !filepath.IsAbs(b.opt.Quarantine) {
		return -1, ""
	}
	q := filepath.Join(b.opt.Quarantine, b.opt.ID, dir)
	if err := os.MkdirAll(q, 0o700); err != nil {
		return -1, ""
	}
	fd, err := unix.Open(q, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, ""
	}
	return fd, q
}

// keepCopy writes data, the session's version of dir/name, into the quarantine
// directory (beside the file when there is none) and says where.
func (b *Baseline) keepCopy(dfd int, dir, name string, data []byte) (string, error) {
	qfd, q := b.quarantineDir(dir)
	if qfd < 0 {
		aside := name + QuarantineSuffix + b.opt.ID
		return filepath.Join(dir, aside), writeAt(dfd, aside, data, 0o600)
	}
	defer unix.Close(qfd)
	for n := 1; n < 100; n++ {
		target := numbered(name, n)
		err := writeAt(qfd, target, data, 0o600)
		if !errors.Is(err, unix.EEXIST) {
			return filepath.Join(q, target), err
		}
	}
	return "", errors.New("every quarantine name is taken")
}

// moveAside moves the entry dir/name (open as dfd) into the quarantine directory:
// renamed where it is the same filesystem, else copied (a file read whole, a
// symlink, a FIFO) and removed; anything else, or without a quarantine directory,
// renamed beside itself as NAME.agentbox-quarantine-ID.
func (b *Baseline) moveAside(dfd int, dir, name string, cur *fileState) (string, error) {
	if qfd, q := b.quarantineDir(dir); qfd >= 0 {
		defer unix.Close(qfd)
		for n := 1; n < 100; n++ {
			target := numbered(name, n)
			err := unix.Renameat2(dfd, name, qfd, target, unix.RENAME_NOREPLACE)
			if errors.Is(err, unix.EXDEV) {
				err = copyOut(dfd, name, qfd, target, cur)
			}
			if err == nil {
				return filepath.Join(q, target), nil
			}
			if !errors.Is(err, unix.EEXIST) {
				break
			}
		}
	}
	aside := name + QuarantineSuffix + b.opt.ID
	if err := unix.Renameat2(dfd, name, dfd, aside, unix.RENAME_NOREPLACE); err != nil {
		return "", err
	}
	return filepath.Join(dir, aside), nil
}

func numbered(name string, n int) string {
	if n == 1 {
		return name
	}
	return name + "-" + strconv.Itoa(n)
}

// copyOut copies what read found at name (its content, link or FIFO) to target
// and removes name; EXDEV for what it cannot copy.
func copyOut(dfd int, name string, qfd int, target string, cur *fileState) error {
	var err error
	switch {
	case cur.odd == "":
		err = writeAt(qfd, target, cur.data, 0o600)
	case cur.link != "":
		err = unix.Symlinkat(cur.link, qfd, target)
	case strings.HasSuffix(cur.odd, "FIFO"):
		err = unix.Mkfifoat(qfd, target, 0o600)
	default:
		return unix.EXDEV
	}
	if err != nil {
		return err
	}
	if err := unix.Unlinkat(dfd, name, 0); err != nil {
		unix.Unlinkat(qfd, target, 0)
		return err
	}
	return nil
}

// writeAt creates name in dfd (never following or replacing anything) with data.
func writeAt(dfd int, name string, data []byte, mode uint32) error {
	fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := f.Write(data); err != nil {
		f.Close()
		unix.Unlinkat(dfd, name, 0)
		return err
	}
	return f.Close()
}
