package shadow

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
	"github.com/agentbox/agentbox/internal/treewalk"
)

// Exact permission bits. Git keeps a file's executable bit and nothing else, so a
// record alone cannot say that a file was 0600 or 0750, nor see a chmod that
// keeps the bit (0750 to 0700). The launch walk lstat's every entry: a session
// keeps the permission bits of the files it found (only those that are not 0644,
// the most common, to keep it small), and its end record names, for each regular
// file the session changed (by ctime: a chmod sets it) or removed, its bits at the
// start and at the end. Undo puts those back exactly: a file written back gets its
// start bits (not the replaced file's, not the umask's), and a file whose bits
// alone changed is chmod'ed back. Set-id and sticky bits are never put back: undo
// makes no set-id file.

// maxStartPerms bounds the files whose bits a session keeps from its launch walk
// (a tree made under umask 077 has few 0644 files); past it the record names none.
const maxStartPerms = 200_000

// maxPerms bounds the files whose bits an end record names; past it, none.
const maxPerms = 20_000

// defaultPerm is the permission bits a kept-bits map leaves out.
const defaultPerm = 0o644

// Perm is a file's permission bits at a session's start and end (0: no regular
// file there).
type Perm struct {
	Path string `json:"path"`
	From uint16 `json:"from"`
	To   uint16 `json:"to"`
}

// startPerms keeps the bits of w's regular files that are not defaultPerm; nil
// when w cannot stand for the tree or holds too many.
func startPerms(w *treewalk.Walk) map[string]uint16 {
	return startBits(w, maxStartPerms, func(e treewalk.Entry) bool {
		return e.Mode == unix.S_IFREG && e.Perm&0o777 != defaultPerm
	})
}

// startBits keeps the permission bits of w's entries that keep accepts, by path;
// nil when w cannot stand for the tree or more than most are kept.
func startBits(w *treewalk.Walk, most int, keep func(treewalk.Entry) bool) map[string]uint16 {
	if w == nil || !w.Complete {
		return nil
	}
	m := map[string]uint16{}
	for _, e := range w.Entries {
		if keep(e) {
			if len(m) == most {
				return nil
			}
			m[e.Rel] = e.Perm & 0o777
		}
	}
	return m
}

// endPerms lists, for the end walk w, each regular file changed since the ctime
// since (or removed) whose bits differ between start and end or are not
// defaultPerm; ok false when they cannot be known (no start bits, no end walk, or
// too many).
func endPerms(start map[string]uint16, w *treewalk.Walk, since int64) ([]Perm, bool) {
	if start == nil || w == nil || !w.Complete {
		return nil, false
	}
	var out []Perm
	seen := make(map[string]bool, len(start))
	for _, e := range w.Entries {
		from, kept := start[e.Rel]
		if kept {
			seen[e.Rel] = true
		}
		if e.Mode != unix.S_IFREG || e.Ctime < since {
			continue
		}
		if !kept {
			from = defaultPerm // or a new file: undo removes it, and looks no further
		}
		to := e.Perm & 0o777
		if from != to || from != defaultPerm {
			out = append(out, Perm{Path: e.Rel, From: from, To: to})
		}
	}
	for p, from := range start {
		if !seen[p] {
			out = append(out, Perm{Path: p, From: from})
		}
	}
	if len(out) > maxPerms {
		return nil, false
	}
	return out, true
}

// recordedPerms reads what a record says of its files' permission bits: the map
// by path, and whether the record knows them (else undo keeps its old rule: the
// replaced file's bits with the recorded executable bit).
func recordedPerms(body string) (map[string]Perm, bool) {
	var r struct {
		Perms      []Perm `json:"perms"`
		PermsKnown bool   `json:"perms_known"`
	}
	if json.Unmarshal([]byte(body), &r) != nil || !r.PermsKnown {
		return nil, false
	}
	m := make(map[string]Perm, len(r.Perms))
	for _, p := range r.Perms {
		m[p.Path] = p
	}
	return m, true
}

// endBody is rec's end record as stored ("" when it cannot be read: it then
// knows neither bits nor directories).
func (s *Store) endBody(rec Record) string {
	body, err := s.git.out("log", "-1", "--format=%b", rec.EndCommit)
	if err != nil {
		return ""
	}
	return body
}

// perms is what an end record body says of its files' bits; nil when it does not
// know them.
func perms(body string) map[string]Perm {
	m, ok := recordedPerms(body)
	if !ok {
		return nil
	}
	return m
}

// withPerms gives each change to a regular file the bits to put back, and adds
// a change for each file within paths whose bits alone changed (perms nil: the
// record does not know them; the changes stay as they are).
func withPerms(changes []Change, perms map[string]Perm, paths []string) []Change {
	if perms == nil {
		return changes
	}
	listed := make(map[string]bool, len(changes))
	for i := range changes {
		c := &changes[i]
		listed[c.Path] = true
		if c.From.Mode != "100644" && c.From.Mode != "100755" {
			continue
		}
		if pm, ok := perms[c.Path]; ok && pm.From != 0 {
			c.Perm = pm.From
		} else if c.From.Mode == "100755" {
			c.Perm = 0o755
		} else {
			c.Perm = defaultPerm
		}
	}
	for _, pm := range perms {
		if pm.From == 0 || pm.To == 0 || pm.From == pm.To || listed[pm.Path] || !underAny(pm.Path, paths) || checkRecordPath(pm.Path) != nil {
			continue
		}
		changes = append(changes, Change{Path: pm.Path, Perm: pm.From, ModeOnly: true, PermTo: pm.To})
	}
	sort.Slice(changes, func(i, j int) bool { return changes[i].Path < changes[j].Path })
	return changes
}

// permDiffers says how the file p below root differs from a regular file with
// the bits to, "" when it is one, and what it found there.
func permDiffers(root int, p string, to uint16) (string, seen) {
	fd, err := openEntry(root, p)
	if err != nil {
		return "is gone (" + describeErr(err) + ")", seen{}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "cannot be read (" + err.Error() + ")", seen{}
	}
	at := seen{known: true, st: st}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "is no regular file now", at
	}
	if uint16(st.Mode&0o7777) != to {
		return "its permission bits changed", at
	}
	return "", at
}

// openEntry opens p below root as O_PATH, following no symlink on the way or at
// the end: a descriptor to stat and chmod through, which opens no FIFO.
func openEntry(root int, p string) (int, error) {
	dir, name := splitPath(p)
	dfd, err := safepath.OpenBeneath(root, dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return -1, err
	}
	defer unix.Close(dfd)
	return unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// chmodEntry sets the bits of the regular file p below root to perm, if it is
// still the file the plan saw (was).
func chmodEntry(root int, p string, perm uint16, was seen) error {
	fd, err := openEntry(root, p)
	if err != nil {
		return fmt.Errorf("%s", describeErr(err))
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return errors.New("is no regular file now")
	}
	if !was.sameAs(&st, true) {
		return ErrChangedSincePlan
	}
	// An O_PATH descriptor takes no fchmod; its /proc link names the file itself.
	return unix.Fchmodat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), uint32(perm&0o777), 0)
}
