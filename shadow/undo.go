package shadow

import (
	"crypto/sha1"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
)

// Undo puts a repository's working tree back to a recorded session's start state:
// the paths the session added, changed or removed (its two recorded trees, diffed),
// each checked first against the session's end state, so that nothing changed since
// is overwritten unseen (undo_write.go writes them).

// UndoBackend is the backend a record of an undo names: log lists undos beside
// sessions, and an undo of an undo puts back the tree it found.
const UndoBackend = "undo"

// maxUndoLink bounds a symlink target read back from the record or the tree.
const maxUndoLink = 4096

// Entry is a path's state in a recorded tree: its Git mode ("" when absent) and
// object id.
type Entry struct {
	Mode string
	OID  string
}

// Change is one path a session changed: its state at the start and at the end.
type Change struct {
	Path     string
	From, To Entry
	// Perm is the permission bits to put back on a regular file (0: the replaced
	// file's, with From's executable bit); ModeOnly: the bits alone changed, from
	// PermTo (perms.go).
	Perm     uint16
	ModeOnly bool
	PermTo   uint16
}

// Refused is a path undo leaves as it is, and why.
type Refused struct {
	Path   string
	Reason string
}

// UndoPlan is what an undo of one session would do.
type UndoPlan struct {
	Session Record
	Changes []Change  // to put back, in path order
	Changed []Refused // changed since the session ended (undo stops unless forced)
	Refused []Refused // never put back: the record does not hold them
	// NotNamed counts the paths the record says it does not hold but does not name.
	NotNamed int
}

// unstored is what a record says it does not hold (the recorder's not_recorded and
// ignored lists, where it has them), read from the record's JSON so that a record
// of any version is understood.
type unstored struct {
	NotRecorded []struct {
		Path   string `json:"path"`
		Reason string `json:"reason"`
	} `json:"not_recorded"`
	NotRecordedCount int      `json:"not_recorded_count"`
	Ignored          []string `json:"ignored"`
	IgnoredCount     int      `json:"ignored_count"`
}

// PlanUndo works out the undo of rec limited to paths (relative to the repository,
// cleaned; none: all), checking each against the working tree now.
func (s *Store) PlanUndo(rec Record, paths []string) (*UndoPlan, error) {
	if !rec.Complete || rec.EndCommit == "" {
		return nil, fmt.Errorf("session %s has no end state (it never finished): nothing to compare the tree with", rec.ID)
	}
	if rec.StartCommit == "" {
		return nil, fmt.Errorf("session %s has no recorded start state", rec.ID)
	}
	changes, err := s.treeChanges(rec.StartCommit, rec.EndCommit)
	if err != nil {
		return nil, err
	}
	p := &UndoPlan{Session: rec}
	for _, c := range changes {
		if !underAny(c.Path, paths) {
			continue
		}
		switch {
		case c.From.Mode == "160000" || c.To.Mode == "160000":
			p.Refused = append(p.Refused, Refused{c.Path, "a nested repository: the record holds its commit, not its files"})
		default:
			p.Changes = append(p.Changes, c)
		}
	}
	if err := s.notStored(rec, paths, p); err != nil {
		return nil, err
	}
	p.Changes = withoutUnstored(p.Changes, p.Refused)
	if _, isStep := s.stepLeftOut(rec.StartCommit); !isStep {
		// The record's bits are the session's start's: a step has none of its own.
		p.Changes = withPerms(p.Changes, s.endPerms(rec), paths)
	}
	if note := s.startLeftOut(rec); note != "" {
		// A path the start record lacks may have been there, unread: removing it
		// is not the record's to decide.
		for _, c := range p.Changes {
			if c.From.Mode == "" {
				p.Changed = append(p.Changed, Refused{c.Path, "the session's start record left files out (" + note + "); this one may have been there"})
			}
		}
	}
	sizes, err := s.blobSizes(p.Changes)
	if err != nil {
		return nil, err
	}
	root, err := openRepo(s.Repo)
	if err != nil {
		return nil, err
	}
	defer unix.Close(root)
	restored := putBackContent(p.Changes)
	for _, c := range p.Changes {
		why := ""
		if c.ModeOnly {
			why = permDiffers(root, c.Path, c.PermTo)
		} else {
			size, ok := sizes[c.To.OID]
			if !ok {
				size = -1
			}
			why = differs(root, c.Path, c.To, size)
			if why == "" && c.From.Mode == "" && !restored[c.To.OID] {
				why = startedBefore(root, c.Path, rec.Start) // undo_origin.go
			}
		}
		if why != "" {
			p.Changed = append(p.Changed, Refused{c.Path, why})
		}
	}
	return p, nil
}

// treeChanges lists what differs between two recorded commits, every path checked
// to be one undo may write.
func (s *Store) treeChanges(from, to string) ([]Change, error) {
	noIndex := "GIT_INDEX_FILE=" + s.Dir + "/agentbox-no-index"
	out, err := s.git.runEnv([]string{noIndex}, nil, "diff-tree", "-r", "-z", "--no-renames", "--no-textconv", "--no-ext-diff", "--raw", from, to)
	if err != nil {
		return nil, fmt.Errorf("shadow: compare the session's trees: %w", err)
	}
	var cs []Change
	fields := strings.Split(string(out), "\x00")
	for i := 0; i+1 < len(fields); i += 2 {
		meta := strings.Fields(strings.TrimPrefix(fields[i], ":"))
		if len(meta) != 5 {
			return nil, fmt.Errorf("shadow: unexpected diff-tree output %q", fields[i])
		}
		path := fields[i+1]
		if err := checkRecordPath(path); err != nil {
			return nil, err
		}
		if !isOID(meta[2]) || !isOID(meta[3]) {
			return nil, fmt.Errorf("shadow: unexpected diff-tree output %q", fields[i])
		}
		c := Change{Path: path, From: Entry{meta[0], meta[2]}, To: Entry{meta[1], meta[3]}}
		if strings.Trim(c.From.OID, "0") == "" {
			c.From = Entry{}
		}
		if strings.Trim(c.To.OID, "0") == "" {
			c.To = Entry{}
		}
		cs = append(cs, c)
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].Path < cs[j].Path })
	return cs, nil
}

// blobSizes are the sizes of the end-state blobs of the regular files among cs, by
// object id, from one git call: a file of another size now has changed and is not
// read, so a later session cannot make undo hash a sparse file per path for free.
func (s *Store) blobSizes(cs []Change) (map[string]int64, error) {
	var in strings.Builder
	for _, c := range cs {
		if c.To.Mode == "100644" || c.To.Mode == "100755" {
			in.WriteString(c.To.OID + "\n")
		}
	}
	sizes := map[string]int64{}
	if in.Len() == 0 {
		return sizes, nil
	}
	out, err := s.git.run(strings.NewReader(in.String()), "cat-file", "--batch-check=%(objectname) %(objectsize)")
	if err != nil {
		return nil, fmt.Errorf("shadow: read the sizes of the recorded files: %w", err)
	}
	for line := range strings.SplitSeq(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		if n, err := strconv.ParseInt(f[1], 10, 64); err == nil { // "OID missing" is no size
			sizes[f[0]] = n
		}
	}
	return sizes, nil
}

// isOID reports whether s is a SHA-1 object id in lower-case hex.
func isOID(s string) bool {
	return len(s) == 40 && strings.Trim(s, "0123456789abcdef") == ""
}

// checkRecordPath refuses a path undo must not write, whoever made the record: the
// paths in it were named by a tree the sandbox wrote.
func checkRecordPath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) || len(p) > 4096 {
		return fmt.Errorf("shadow: the record names a path undo refuses: %q", p)
	}
	for c := range strings.SplitSeq(p, "/") {
		if c == "" || c == "." || c == ".." || strings.EqualFold(c, ".git") {
			return fmt.Errorf("shadow: the record names a path undo refuses: %q", p)
		}
	}
	return nil
}

// underAny reports whether p is one of paths or below one (no paths: every p).
func underAny(p string, paths []string) bool {
	if len(paths) == 0 {
		return true
	}
	for _, q := range paths {
		if q == "." || p == q || strings.HasPrefix(p, q+"/") {
			return true
		}
	}
	return false
}

// notStored adds to p what the record says it does not hold, within paths.
func (s *Store) notStored(rec Record, paths []string, p *UndoPlan) error {
	body, err := s.git.out("log", "-1", "--format=%b", rec.EndCommit)
	if err != nil {
		return fmt.Errorf("shadow: read the record of %s: %w", rec.ID, err)
	}
	var u unstored
	if strings.TrimSpace(body) == "" {
		return nil // an older record, which has no such lists
	}
	if json.Unmarshal([]byte(body), &u) != nil {
		// Without the list, undo could put start content over what the record
		// could not hold: refuse, as startLeftOut does.
		return fmt.Errorf("shadow: the record of %s cannot be read; not undoing it", rec.ID)
	}
	for _, n := range u.NotRecorded {
		if underAny(n.Path, paths) || n.Path == "." {
			p.Refused = append(p.Refused, Refused{n.Path, "not in the record: " + n.Reason})
		}
	}
	for _, n := range u.Ignored {
		if underAny(n, paths) {
			p.Refused = append(p.Refused, Refused{n, "not in the record: the repository's .gitignore files leave it out"})
		}
	}
	p.NotNamed = max(0, u.NotRecordedCount-len(u.NotRecorded)) + max(0, u.IgnoredCount-len(u.Ignored))
	return nil
}

// withoutUnstored drops the changes to paths the record says it does not hold: a
// tracked file that grew past the recorder's bounds shows in the end tree as
// removed, and putting its start content back would overwrite what the session
// left there, unseen. They are in refused already.
func withoutUnstored(changes []Change, refused []Refused) []Change {
	out := changes[:0]
	for _, c := range changes {
		held := true
		for _, r := range refused {
			if r.Path == "." || underAny(c.Path, []string{r.Path}) {
				held = false
				break
			}
		}
		if held {
			out = append(out, c)
		}
	}
	return out
}

// startLeftOut is the first note of rec's start commit saying it left a file out,
// "" when it holds the whole tree.
func (s *Store) startLeftOut(rec Record) string {
	if note, isStep := s.stepLeftOut(rec.StartCommit); isStep {
		return note
	}
	body, err := s.git.out("log", "-1", "--format=%b", rec.StartCommit)
	if err != nil {
		return "its record cannot be read"
	}
	var start Record
	if json.Unmarshal([]byte(body), &start) != nil {
		return "its record cannot be read"
	}
	for _, n := range start.Notes {
		if strings.HasPrefix(n, "start: ") && (strings.Contains(n, "error: ") || strings.Contains(n, "not recorded")) {
			return oneLine(n, 120)
		}
	}
	return ""
}

// differs says how the tree's path p (below root) differs from e, "" when it is as
// e has it. It opens no parent through a symlink, and reads only a regular file, and
// that only when its size is the blob's (size; -1: unknown).
func differs(root int, p string, e Entry, size int64) string {
	dir, name := splitPath(p)
	dfd, err := safepath.OpenBeneath(root, dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		if e.Mode == "" {
			return "" // no parent directory, or not one: the path is not there
		}
		return "is gone (" + describeErr(err) + ")"
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if e.Mode == "" && errors.Is(err, unix.ENOENT) {
			return ""
		}
		return "is gone (" + describeErr(err) + ")"
	}
	if e.Mode == "" {
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return "" // a tree holds no directories: what is below one is compared path by path
		}
		return "was created after the session"
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		if e.Mode != "120000" {
			return "is a symlink now"
		}
		buf := make([]byte, maxUndoLink+1)
		n, err := unix.Readlinkat(dfd, name, buf)
		if err != nil || n > maxUndoLink || linkBlobID(buf[:n]) != e.OID {
			return "points elsewhere now"
		}
		return ""
	case unix.S_IFREG:
		if e.Mode != "100644" && e.Mode != "100755" {
			return "is a regular file now"
		}
		if exec := st.Mode&0o100 != 0; exec != (e.Mode == "100755") {
			return "its executable bit changed"
		}
		if size >= 0 && st.Size != size {
			return "its content changed"
		}
		id, err := fileBlobID(dfd, name, st.Size)
		if err != nil {
			return "cannot be read (" + describeErr(err) + ")"
		}
		if id != e.OID {
			return "its content changed"
		}
		return ""
	case unix.S_IFDIR:
		return "is a directory now"
	default:
		return "is a special file now (FIFO, socket or device)"
	}
}

// openRepo opens the repository undo writes, following no symlink anywhere on its
// path: the record holds the path as resolved when the session started, so a symlink
// on it now was put there since, perhaps by a session of a repository around this one,
// and would make undo write a directory elsewhere.
func openRepo(repo string) (int, error) {
	fd, err := safepath.Open(repo, unix.O_PATH|unix.O_DIRECTORY)
	if errors.Is(err, safepath.ErrSymlink) {
		return -1, fmt.Errorf("repository %s: its path goes through a symlink now, not as when the session ran; undo writes nowhere else (check the path, then run undo from the repository as it is)", repo)
	}
	if err != nil {
		return -1, fmt.Errorf("repository %s: %w", repo, err)
	}
	return fd, nil
}

// splitPath splits a record path into its directory ("" for the top) and name.
func splitPath(p string) (dir, name string) {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i], p[i+1:]
	}
	return "", p
}

func describeErr(err error) string {
	if errors.Is(err, safepath.ErrSymlink) {
		return "a parent directory is a symlink"
	}
	if errors.Is(err, unix.ENOTDIR) {
		return "a parent is not a directory"
	}
	return err.Error()
}

// linkBlobID is the Git object id (SHA-1) of a blob holding b.
func linkBlobID(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return fmt.Sprintf("%x", h.Sum(nil))
}

// fileBlobID is the blob id of the regular file name below dfd, whose size is size:
// opened without following a symlink or blocking, read to size bytes at most
// (maxRecordFile: larger is never a recorded file).
func fileBlobID(dfd int, name string, size int64) (string, error) {
	if size > maxRecordFile {
		return "", errors.New("larger than any recorded file")
	}
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != size {
		return "", errors.New("changed while being read")
	}
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", size)
	n, err := io.Copy(h, io.LimitReader(f, size))
	if err != nil {
		return "", err
	}
	if n != size {
		return "", errors.New("changed while being read")
	}
	return fmt.Sprintf("%x", h.Sum(nil)), nil
}
