package agentcfg

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
)

// MaxFileBytes bounds what the audit reads of one file; a bigger one is put back
// as it was whole.
const MaxFileBytes = 16 << 20

// QuarantineSuffix is inserted between a file's name and the session id for the
// session's version of a file the audit put back (as gitguard names its own).
const QuarantineSuffix = ".agentbox-quarantine-"

// Options say what one session's audit covers.
type Options struct {
	Home string   // canonical HOME
	Kept []string // canonical kept paths (policy.Kept.Path)
	Repo string   // the session's repository: trusting it in Claude Code is kept
	ID   string   // names the moved-aside files: NAME.agentbox-quarantine-ID
}

// Baseline is the audited files as they were before the session.
type Baseline struct {
	opt   Options
	files []*fileState
}

type fileState struct {
	path    string
	f       format
	exists  bool
	odd     string // not a regular file of a readable size: what it is instead
	link    string // odd as a symlink: its target, to tell the user's own link
	mode    uint32 // permission bits
	data    []byte
	entries map[string]entry
	parsed  bool
}

// Finding is one thing the audit put back.
type Finding struct {
	Path    string // the host file
	Key     string // the key put back; "" for the whole file
	What    string // "new", "changed", "replaced by a symlink" …
	MovedTo string // where the session's version of the file is, "" when none was kept
}

func (f Finding) String() string {
	s := printable(f.Path)
	if f.Key != "" {
		s += ": " + f.What + " " + printable(f.Key) + ", put back as it was"
	} else {
		s += ": " + f.What + ", put back as it was"
	}
	if f.MovedTo != "" {
		s += "; the session's version is " + printable(f.MovedTo)
	}
	return s
}

// printable keeps a hostile name on one line and free of terminal controls.
func printable(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) || r == '\\' {
			b, _ := json.Marshal(s)
			return string(b)
		}
	}
	return s
}

// Covered lists the files the audit covers for these kept paths.
func (o Options) covered() []struct {
	path string
	f    format
} {
	var list []struct {
		path string
		f    format
	}
	for _, k := range known {
		p := filepath.Join(o.Home, k.rel)
		if o.kept(p) {
			list = append(list, struct {
				path string
				f    format
			}{p, k.f})
		}
	}
	for _, g := range knownGlobs {
		dir := filepath.Join(o.Home, g.dir)
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			if ok, _ := filepath.Match(g.pattern, e.Name()); ok && o.kept(p) {
				list = append(list, struct {
					path string
					f    format
				}{p, g.f})
			}
		}
	}
	return list
}

func (o Options) kept(p string) bool {
	for _, k := range o.Kept {
		if p == k || strings.HasPrefix(p, k+"/") {
			return true
		}
	}
	return false
}

// Snapshot records the baseline: the known files in the kept paths, and every
// script in a kept path that one of their keys names as a program.
func Snapshot(opt Options) *Baseline {
	b := &Baseline{opt: opt}
	seen := map[string]bool{}
	for _, c := range opt.covered() {
		st := read(c.path, c.f, opt.Repo)
		b.files = append(b.files, st)
		seen[c.path] = true
	}
	for _, st := range append([]*fileState(nil), b.files...) {
		for _, p := range programPaths(st.entries, opt.Home) {
			if !seen[p] && opt.kept(p) {
				seen[p] = true
				b.files = append(b.files, read(p, wholeFile, opt.Repo))
			}
		}
	}
	return b
}

// read reads one file without following a symlink in any component, without
// blocking on a FIFO, and at most MaxFileBytes of it.
func read(path string, f format, repo string) *fileState {
	st := &fileState{path: path, f: f}
	fd, err := safepath.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	switch {
	case errors.Is(err, unix.ENOENT):
		return st
	case errors.Is(err, safepath.ErrSymlink) || errors.Is(err, unix.ELOOP):
		st.exists, st.odd = true, "replaced by a symlink"
		st.link, _ = os.Readlink(path)
		return st
	case err != nil:
		st.exists, st.odd = true, "unreadable ("+err.Error()+")"
		return st
	}
	file := os.NewFile(uintptr(fd), path)
	defer file.Close()
	st.exists = true
	fi, err := file.Stat()
	switch {
	case err != nil:
		st.odd = "unreadable (" + err.Error() + ")"
		return st
	case !fi.Mode().IsRegular():
		st.odd = "replaced by a " + kind(fi.Mode())
		return st
	case fi.Size() > MaxFileBytes:
		st.odd = fmt.Sprintf("larger than %d bytes", MaxFileBytes)
		return st
	}
	st.mode = uint32(fi.Mode().Perm())
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(file, MaxFileBytes+1)); err != nil {
		st.odd = "unreadable (" + err.Error() + ")"
		return st
	}
	if buf.Len() > MaxFileBytes {
		st.odd = fmt.Sprintf("larger than %d bytes", MaxFileBytes)
		return st
	}
	st.data = buf.Bytes()
	st.entries, st.parsed = entries(f, st.data, repo)
	return st
}

func kind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&os.ModeNamedPipe != 0:
		return "FIFO"
	case m&os.ModeSocket != 0:
		return "socket"
	case m&os.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

// Audit compares the files with the baseline and puts back everything new or
// changed that names a program: a JSON file's offending keys are set back to
// their baseline (the user's other changes stay), any other file is put back whole;
// either way the session's version is kept beside it. It returns what it did.
func (b *Baseline) Audit() []Finding {
	for _, c := range b.opt.covered() {
		if !b.has(c.path) {
			b.files = append(b.files, &fileState{path: c.path, f: c.f}) // new since the baseline
		}
	}
	var out []Finding
	for _, base := range b.files {
		out = append(out, b.auditFile(base)...)
	}
	return out
}

func (b *Baseline) auditFile(base *fileState) []Finding {
	cur := read(base.path, base.f, b.opt.Repo)
	if !cur.exists {
		return nil // removed: nothing runs from it any more
	}
	whole := func(what string) []Finding {
		moved, err := b.putBack(base, cur)
		f := Finding{Path: base.path, What: what, MovedTo: moved}
		if err != nil {
			f.What += " (could not put it back: " + err.Error() + ")"
		}
		return []Finding{f}
	}
	if base.odd != "" && cur.odd == base.odd && cur.link == base.link {
		return nil // as it was before the session (the user's own link, say)
	}
	if cur.odd != "" {
		return whole(cur.odd)
	}
	if base.exists && bytes.Equal(base.data, cur.data) {
		return nil
	}
	if !cur.parsed {
		return whole("no longer readable as " + formatName(base.f))
	}
	var keys []Finding
	for name, e := range cur.entries {
		old, had := base.entries[name]
		if !e.exec || (had && old.value == e.value) {
			continue
		}
		what := "new"
		if had {
			what = "changed"
		}
		keys = append(keys, Finding{Path: base.path, Key: name, What: what})
	}
	if len(keys) == 0 {
		return nil
	}
	if base.f == wholeFile {
		w := "changed"
		if !base.exists {
			w = "new"
		}
		return whole(w)
	}
	if base.f == codexConfig {
		what := make([]string, len(keys))
		for i, k := range keys {
			what[i] = k.What + " " + k.Key
		}
		return whole(strings.Join(what, ", ") + " (TOML: the whole file)")
	}
	moved, err := b.putBackKeys(base, cur, keys)
	for i := range keys {
		keys[i].MovedTo = moved
		if err != nil {
			keys[i].What += " (could not put it back: " + err.Error() + ")"
		}
	}
	return keys
}

func formatName(f format) string {
	if f == codexConfig {
		return "TOML"
	}
	return "JSON"
}

// putBack keeps the session's file aside and puts the baseline in its place
// (nothing, when there was no file before).
func (b *Baseline) putBack(base, cur *fileState) (string, error) {
	if b.inPlace(base.path, cur) {
		return b.rewrite(base.path, cur.data, base.data)
	}
	dir, name := filepath.Split(base.path)
	dfd, err := safepath.Open(filepath.Clean(dir), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return "", err
	}
	defer unix.Close(dfd)
	aside := name + QuarantineSuffix + b.opt.ID
	if err := unix.Renameat2(dfd, name, dfd, aside, unix.RENAME_NOREPLACE); err != nil {
		return "", err
	}
	switch {
	case base.exists && base.odd == "":
		if err := writeAt(dfd, name, base.data, base.mode); err != nil {
			return filepath.Join(dir, aside), err
		}
	case base.link != "":
		if err := unix.Symlinkat(base.link, dfd, name); err != nil {
			return filepath.Join(dir, aside), err
		}
	}
	return filepath.Join(dir, aside), nil
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

// putBackKeys keeps a copy of the session's JSON file aside and rewrites the file
// with the offending keys as they were in the baseline (absent when they were).
func (b *Baseline) putBackKeys(base, cur *fileState, keys []Finding) (string, error) {
	var doc map[string]any
	d := json.NewDecoder(bytes.NewReader(cur.data))
	d.UseNumber()
	if err := d.Decode(&doc); err != nil || doc == nil {
		doc = map[string]any{}
	}
	for _, k := range keys {
		e := cur.entries[k.Key]
		old, had := base.entries[k.Key]
		var v any
		if had {
			dd := json.NewDecoder(strings.NewReader(old.value))
			dd.UseNumber()
			_ = dd.Decode(&v)
		}
		setPath(doc, e.path, v, had)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return "", err
	}
	if b.inPlace(base.path, cur) {
		return b.rewrite(base.path, cur.data, buf.Bytes())
	}
	dir, name := filepath.Split(base.path)
	dfd, err := safepath.Open(filepath.Clean(dir), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return "", err
	}
	defer unix.Close(dfd)
	aside := name + QuarantineSuffix + b.opt.ID
	if err := writeAt(dfd, aside, cur.data, 0o600); err != nil {
		return "", err
	}
	tmp := name + ".agentbox-tmp-" + b.opt.ID
	mode := cur.mode
	if base.exists {
		mode = base.mode
	}
	if err := writeAt(dfd, tmp, buf.Bytes(), mode); err != nil {
		return filepath.Join(dir, aside), err
	}
	if err := unix.Renameat(dfd, tmp, dfd, name); err != nil {
		unix.Unlinkat(dfd, tmp, 0)
		return filepath.Join(dir, aside), err
	}
	return filepath.Join(dir, aside), nil
}

// rewrite keeps session (the file's current content) aside and writes fixed into
// the file's own inode.
func (b *Baseline) rewrite(path string, session, fixed []byte) (string, error) {
	dir, name := filepath.Split(path)
	dfd, err := safepath.Open(filepath.Clean(dir), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return "", err
	}
	defer unix.Close(dfd)
	aside := name + QuarantineSuffix + b.opt.ID
	if err := writeAt(dfd, aside, session, 0o600); err != nil {
		return "", err
	}
	fd, err := safepath.OpenBeneath(dfd, name, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return filepath.Join(dir, aside), err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return filepath.Join(dir, aside), errors.New("not a regular file any more")
	}
	if err := f.Truncate(0); err != nil {
		return filepath.Join(dir, aside), err
	}
	if _, err := f.WriteAt(fixed, 0); err != nil {
		return filepath.Join(dir, aside), err
	}
	return filepath.Join(dir, aside), nil
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
