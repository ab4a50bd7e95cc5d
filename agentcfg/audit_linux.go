package agentcfg

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
	"github.com/agentbox/agentbox/internal/widen"
)

// MaxFileBytes bounds what the audit reads of one file; a bigger one is put back
// as it was whole.
const MaxFileBytes = 16 << 20

// maxReadBytes bounds what one baseline, or one audit, reads in all; beyond it a
// file is known by its size and times only, and a change to it is put back whole.
const maxReadBytes = 256 << 20

// QuarantineSuffix is inserted between a file's name and the session id for the
// session's version of a file the audit put back (as gitguard names its own).
const QuarantineSuffix = ".agentbox-quarantine-"

// Options say what one session's audit covers.
type Options struct {
	Home string   // canonical HOME
	Kept []string // canonical kept paths (policy.Kept.Path)
	Repo string   // the session's repository: trusting it in the agents is kept
	ID   string   // names the session's versions of what was put back
	// Skip are directories bound read-only or private inside (the presets'):
	// their host files cannot change, so they are not walked.
	Skip []string
	// AgentDirs moves an agent's directory (by agent name, "claude", "codex") where
	// the launcher's environment says it is ($CLAUDE_CONFIG_DIR, $CODEX_HOME).
	AgentDirs map[string]string
	// Quarantine is where the session's versions go, as Quarantine/ID/PATH; ""
	// keeps them beside the file as NAME.agentbox-quarantine-ID.
	Quarantine string
	// WidenJournal is where the modes the audit widens are journaled
	// (internal/widen), for a killed launcher's to be put back; "" journals nothing.
	WidenJournal string `json:",omitempty"`
}

// AgentDirEnv lists the environment variables that move an agent's directory,
// by agent name, for Options.AgentDirs.
func AgentDirEnv() map[string]string {
	m := map[string]string{}
	for _, a := range agentDirs {
		m[a.agent] = a.env
	}
	m[zdotdirKey] = "ZDOTDIR"
	return m
}

// Baseline is the audited files as they were before the session.
type Baseline struct {
	opt   Options
	files []*fileState
	over  bool // the walk stopped at maxWalk
}

type fileState struct {
	path    string
	f       format
	auto    bool // f is decided from the file each time it is read
	exists  bool
	odd     string // not a regular file of a readable size: what it is instead
	link    string // odd as a symlink: its target, to tell the user's own link
	stamp   string // odd as too large: size and times, to tell a change
	mode    uint32 // permission bits
	gid     uint32 // group, for sharedWrite
	data    []byte
	entries map[string]entry
	parsed  bool
}

// Finding is one thing the audit put back, or, for a project file, reports.
type Finding struct {
	Path    string // the host file
	Key     string // the key put back; "" for the whole file
	What    string // "new", "changed", "replaced by a symlink" …
	MovedTo string // where the session's version of the file is, "" when none was kept
	// Left: reported only, left as it is (the repository's own agent files).
	Left bool
	// Unresolved: neither audited nor put back, where an agent may still open
	// it: the session fails (125).
	Unresolved bool
}

func (f Finding) String() string {
	s := printable(f.Path) + ": " + f.What
	if f.Key != "" {
		s += " " + printable(f.Key)
	}
	switch {
	case f.Unresolved:
		s += "; NOT put back: review it, or remove it, before an agent runs outside agentbox"
	case f.Left:
		s += ", left in place: review it before an agent runs in this repository outside agentbox"
	case f.Key != "" || f.What != "" && !strings.HasPrefix(f.What, "more than"):
		s += ", put back as it was"
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

// Snapshot records the baseline: the files the kept paths cover, and every
// script in a kept path that one of their keys names as a program.
func Snapshot(opt Options) *Baseline {
	b := &Baseline{opt: opt}
	r := opt.relaxer()
	defer r.Restore()
	list, over, _, _ := opt.covered(r)
	b.over = over
	seen := map[string]bool{}
	left := int64(maxReadBytes)
	for _, c := range list {
		b.files = append(b.files, read(c.path, c.f, opt.Repo, &left, r))
		seen[c.path] = true
	}
	for _, st := range append([]*fileState(nil), b.files...) {
		for _, p := range programPaths(st.entries, opt.Home) {
			if !seen[p] && opt.kept(p) {
				seen[p] = true
				b.files = append(b.files, read(p, wholeFile, opt.Repo, &left, r))
			}
		}
	}
	return b
}

// read reads one file without following a symlink in any component, without
// blocking on a FIFO, and at most MaxFileBytes of it. f is auto for a file whose
// format is decided from its name, mode and first bytes. left, unless nil, is what
// may still be read, and is lowered by what is. r, unless nil, widens the owner's
// modes on the way where the session made the file or a directory unreadable.
func read(path string, f format, repo string, left *int64, r *widen.Relaxer) *fileState {
	st := &fileState{path: path, f: f, auto: f == auto}
	if st.auto {
		st.f = opaque
	}
	fd, err := r.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	switch {
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR):
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
	var sys unix.Stat_t
	fi, err := file.Stat()
	if err == nil {
		err = unix.Fstat(fd, &sys)
	}
	switch {
	case err != nil:
		st.odd = "unreadable (" + err.Error() + ")"
		return st
	case !fi.Mode().IsRegular():
		st.odd = "replaced by a " + kind(fi.Mode())
		return st
	case fi.Size() > MaxFileBytes:
		st.odd = fmt.Sprintf("larger than %d bytes", MaxFileBytes)
		st.stamp = fmt.Sprint(sys.Ino, sys.Size, sys.Mtim, sys.Ctim)
		return st
	case left != nil && *left < fi.Size():
		st.odd = fmt.Sprintf("not read: beyond the %d bytes an audit reads", maxReadBytes)
		st.stamp = fmt.Sprint(sys.Ino, sys.Size, sys.Mtim, sys.Ctim)
		return st
	}
	if left != nil {
		*left -= fi.Size()
	}
	st.mode, st.gid = uint32(fi.Mode().Perm()), sys.Gid
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(file, MaxFileBytes+1)); err != nil {
		st.odd = "unreadable (" + err.Error() + ")"
		return st
	}
	if buf.Len() > MaxFileBytes {
		st.odd = fmt.Sprintf("larger than %d bytes", MaxFileBytes)
		st.stamp = fmt.Sprint(sys.Ino, sys.Size, sys.Mtim, sys.Ctim)
		return st
	}
	st.data = buf.Bytes()
	if st.auto {
		st.f = formatOf(filepath.Base(path), st.data, st.mode)
	}
	st.entries, st.parsed = entries(st.f, st.data, repo)
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
// changed that names a program: a JSON or TOML file's offending keys are set back
// to their baseline (the user's other changes stay), any other file is put back
// whole; either way the session's version is kept. It returns what it did.
//
// What the session made unreadable is read all the same (widen), the modes put
// back after; what the audit still cannot read, or put back, fails the session
// (Finding.Unresolved).
func (b *Baseline) Audit() (out []Finding) {
	r := b.opt.relaxer()
	list, over, blind, shared := b.opt.covered(r)
	defer func() { out = append(out, unshare(shared)...) }() // after the modes widened are back
	defer r.Restore()
	for _, c := range list {
		if !b.has(c.path) {
			b.files = append(b.files, &fileState{path: c.path, f: c.f, auto: c.f == auto}) // new since the baseline
		}
	}
	out = blind
	if over || b.over {
		out = append(out, b.opt.overFinding())
	}
	left := int64(maxReadBytes)
	var links []*fileState
	for _, base := range b.files {
		if base.f == outLink {
			links = append(links, base)
			continue
		}
		out = append(out, b.auditFile(base, &left, r)...)
	}
	return append(out, b.auditLinks(links, r)...)
}

func (b *Baseline) auditFile(base *fileState, left *int64, r *widen.Relaxer) []Finding {
	hint := base.f
	if base.auto {
		hint = auto
	}
	cur := read(base.path, hint, b.opt.Repo, left, r)
	whole := func(what string) []Finding {
		moved, err := widened(r, base.path, func() (string, error) { return b.putBack(base, cur) })
		f := Finding{Path: base.path, What: what, MovedTo: moved}
		if err != nil {
			f.What += " (could not put it back: " + err.Error() + ")"
			f.Unresolved = true
		}
		return []Finding{f}
	}
	if !cur.exists {
		if removalCounts(base) {
			return whole("removed")
		}
		return nil
	}
	if base.odd != "" && cur.odd == base.odd && cur.link == base.link && cur.stamp == base.stamp {
		return nil // as it was before the session (the user's own link, say)
	}
	if cur.odd != "" {
		if cur.odd == base.odd {
			return whole("changed, " + cur.odd)
		}
		return whole(cur.odd)
	}
	if base.exists && base.odd == "" && bytes.Equal(base.data, cur.data) && cur.mode == base.mode {
		return nil
	}
	if base.exists && base.odd == "" && cur.mode&^base.mode&0o111 != 0 {
		return whole("made executable")
	}
	if sharedWrite(cur.mode, cur.gid) && !(base.exists && base.odd == "" && sharedWrite(base.mode, base.gid)) {
		return whole("made writable by others")
	}
	if !cur.parsed {
		if !base.exists {
			return whole("new, not readable as " + formatName(cur.f))
		}
		return whole("no longer readable as " + formatName(cur.f))
	}
	if what := loginChange(cur.f, base.data, cur.data, base.exists && base.odd == ""); what != "" {
		return whole(what)
	}
	keys := changedKeys(base, cur)
	if len(keys) == 0 {
		return nil
	}
	newOrChanged := "changed"
	if !base.exists {
		newOrChanged = "new"
	}
	switch {
	case base.odd != "":
		return whole("changed, where no regular file was before") // the user's link comes back whole
	case base.exists && base.f != cur.f:
		return whole(newOrChanged + ", now " + formatName(cur.f))
	case cur.f == opaque:
		return whole(newOrChanged + " (not a format agentbox can read)")
	case wholeFormat(cur.f):
		return whole(newOrChanged)
	case len(keys) > maxKeyFindings:
		return whole(fmt.Sprintf("%s, %d keys (%s, %s …): the whole file", newOrChanged, len(keys), keys[0].Key, keys[1].Key))
	}
	for _, k := range keys {
		if keyPath(base, cur, k.Key) == nil {
			return whole(newOrChanged)
		}
	}
	moved, err := widened(r, base.path, func() (string, error) { return b.putBackKeys(base, cur, keys) })
	if errors.Is(err, errNotKeyByKey) {
		var what []string
		for _, k := range keys {
			what = append(what, k.What+" "+k.Key)
		}
		return whole(strings.Join(what, ", ") + " (" + formatName(cur.f) + " that could not be rewritten: the whole file)")
	}
	for i := range keys {
		keys[i].MovedTo = moved
		if err != nil {
			keys[i].What += " (could not put it back: " + err.Error() + ")"
			keys[i].Unresolved = true
		}
	}
	return keys
}

// maxKeyFindings bounds the findings one file gives key by key; past it the file
// is put back whole in one finding, so that a file of a million new keys writes one
// line to the terminal and the session's record, not a million (250 MB).
const maxKeyFindings = 64

// widened runs putBack, and once more where it failed with EACCES and r could widen
// the owner's modes on the way to path (the session made the directory or the kept
// file read-only).
func widened(r *widen.Relaxer, path string, putBack func() (string, error)) (string, error) {
	moved, err := putBack()
	if errors.Is(err, unix.EACCES) && r.Widen(path) {
		moved, err = putBack()
	}
	return moved, err
}

// changedKeys are the exec-shaped keys of cur that are new or changed since base,
// and those of base that cur no longer has: a key removed may have held the user's
// restriction (disableAllHooks, a deny list, approval_policy), and without it more
// runs without asking.
func changedKeys(base, cur *fileState) []Finding {
	var keys []Finding
	for name, e := range cur.entries {
		old, had := base.entries[name]
		if !e.exec || (had && old.value == e.value) || (!had && emptyValue(e.value)) {
			continue
		}
		what := "new"
		if had {
			what = "changed"
		}
		keys = append(keys, Finding{Path: cur.path, Key: name, What: what})
	}
	for name, old := range base.entries {
		if _, has := cur.entries[name]; !has && old.exec && !old.own && !heldNothing(old.value) {
			keys = append(keys, Finding{Path: cur.path, Key: name, What: "removed"})
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Key < keys[j].Key })
	return keys
}

// keyPath is where the key name lies in the file: in cur, or, for a key cur no
// longer has, in base; nil for the whole file.
func keyPath(base, cur *fileState, name string) []string {
	if e, ok := cur.entries[name]; ok {
		return e.path
	}
	return base.entries[name].path
}

// removalCounts: removing the file base widens what runs, or may: it held an
// exec-shaped key (in a settings file, any key but the harmless), or is code or a
// file agentbox cannot read, or was the user's own symlink (to their settings,
// say) outside the data paths. Removing a file too large to read, or a special
// file, leaves nothing the audit could put back; a lock file (NAME.lock: Claude
// Code's ide/ locks) holds no setting, and its owner removes it when it exits.
func removalCounts(base *fileState) bool {
	switch {
	case !base.exists || strings.HasSuffix(base.path, ".lock"):
		return false
	case base.odd == "" && holdsLogin(base):
		return true
	case base.link != "":
		return base.auto || base.f != opaque
	case base.odd != "":
		return false
	case !base.parsed:
		return true
	}
	for _, e := range base.entries {
		if e.exec && !heldNothing(e.value) {
			return true
		}
	}
	return false
}

// emptyValue: a key set to nothing ([], {}, "", null, false) names no program and
// widens nothing where there was no key (Claude Code writes "allowedTools": [] for
// every project it opens); changed to that from something else, it counts.
func emptyValue(v string) bool {
	switch v {
	case "[]", "{}", `""`, "null", "false":
		return true
	}
	return false
}

// heldNothing: a removed key's value was empty, or an object of only empty values:
// removing it takes no restriction away (Claude Code drops a key equal to its
// default when it saves its state, such as "customApiKeyResponses": {"approved":
// [], "rejected": []}).
func heldNothing(v string) bool {
	if emptyValue(v) {
		return true
	}
	if !strings.HasPrefix(v, "{") {
		return false
	}
	x, ok := decodeJSON([]byte(v))
	return ok && emptyJSON(x)
}

func emptyJSON(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case bool:
		return !x
	case string:
		return x == ""
	case []any:
		return len(x) == 0
	case map[string]any:
		for _, y := range x {
			if !emptyJSON(y) {
				return false
			}
		}
		return true
	}
	return false
}

// wholeFormat: a format put back whole, never key by key.
func wholeFormat(f format) bool {
	switch f {
	case claudeSettings, claudeState, jsonDoc, codexConfig, tomlDoc, claudeLogin, codexLogin:
		return false
	}
	return true
}

func formatName(f format) string {
	switch f {
	case codexConfig, tomlDoc:
		return "TOML"
	case claudeSettings, claudeState, jsonDoc, claudeLogin, codexLogin:
		return "JSON"
	case jsonLines:
		return "JSON lines"
	case textKeys:
		return "YAML"
	case markdown:
		return "Markdown"
	case wholeFile:
		return "code"
	}
	return "an unknown format"
}

// holdsLogin: the file base held a login (its removal counts).
func holdsLogin(base *fileState) bool {
	l, ok := readLogin(base.f, base.data)
	return ok && l.present
}

// unshare takes others' write off the directories in dirs that are still what the
// walk listed, and reports each: a kept agent directory that another user can
// write lets them plant hooks or a login between sessions, where no audit looks.
// It is done whoever made the directory so: once done, it is not reported again.
func unshare(dirs []dirID) []Finding {
	var out []Finding
	for _, d := range dirs {
		fd, err := unix.Open(d.path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // gone, or no longer a directory: nothing of it is kept
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Dev == d.dev && st.Ino == d.ino && sharedWrite(st.Mode&0o7777, st.Gid) {
			f := Finding{Path: d.path, What: fmt.Sprintf("writable by others (mode %04o): their write taken off", st.Mode&0o7777)}
			if err := unix.Fchmod(fd, st.Mode&0o7777&^0o022); err != nil {
				f.What, f.Unresolved = fmt.Sprintf("writable by others (mode %04o), and could not be changed: %v", st.Mode&0o7777, err), true
			}
			out = append(out, f)
		}
		unix.Close(fd)
	}
	return out
}
