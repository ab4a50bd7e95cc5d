package shadow

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
	"github.com/agentbox/agentbox/internal/treewalk"
)

// UndoResult is what an undo did.
type UndoResult struct {
	ID     string    // the undo's own record, which an undo of it reverses
	Done   int       // paths put back
	Failed []Refused // paths it could not put back, and why
}

// ApplyUndo records the working tree as the start of an undo of its own (rec: its
// record as known now; an undo that cannot be recorded changes nothing), puts back
// p.Changes and records the result as that undo's end. walk, when not nil, walks
// the working tree as the audit does: the record then stages only what changed
// since the last one (changed.go), not the whole tree.
func (s *Store) ApplyUndo(p *UndoPlan, rec Record, walk func() *treewalk.Walk) (*UndoResult, error) {
	rec.Backend = UndoBackend
	if walk == nil {
		walk = func() *treewalk.Walk { return nil }
	}
	ss, err := s.BeginWalk(rec, walk())
	if err == nil {
		err = ss.Wait()
	}
	if err != nil {
		return nil, fmt.Errorf("the tree as it is could not be recorded first, so nothing was changed: %w", err)
	}
	res := &UndoResult{ID: ss.ID()}
	var kept []Refused
	p, kept = s.withoutUnrecorded(p, ss.startTree)
	res.Done, res.Failed = s.putBack(p)
	res.Failed = append(kept, res.Failed...)
	rec.End = time.Now()
	if len(res.Failed) > 0 {
		rec.ExitStatus = 1
	}
	for _, f := range res.Failed {
		rec.Notes = append(rec.Notes, "not put back: "+strconv.Quote(f.Path)+": "+f.Reason)
	}
	if err := ss.FinishWalk(rec, walk()); err != nil {
		return res, fmt.Errorf("the undo's end state could not be recorded: %w", err)
	}
	return res, nil
}

// withoutUnrecorded is p without the changes that would replace or remove what
// the undo's own start record (tree) does not hold, and those changes, refused:
// the record has the recorder's bounds and honours the .gitignore files as they
// are now, so a file the operator made large or sparse since the session, or one
// now ignored, is not in it, and overwriting it (--force) could not be undone.
// Nothing is lost by a change that makes what was absent, sets bits alone, or
// removes an empty directory.
func (s *Store) withoutUnrecorded(p *UndoPlan, tree string) (*UndoPlan, []Refused) {
	var over []string
	for _, c := range p.Changes {
		if !c.ModeOnly && c.seen.known && !c.seen.absent && !c.seen.isDir() {
			over = append(over, c.Path)
		}
	}
	if len(over) == 0 {
		return p, nil
	}
	held, err := s.treeHolds(tree, over)
	why := "what is there now is not in the undo's own record (past the recorder's bounds, or ignored), so undoing the undo could not bring it back; left as it is"
	if err != nil {
		held, why = nil, "the undo's own record cannot be read to see that it holds what is there now ("+oneLine(err.Error(), 120)+"); left as it is"
	}
	q := *p
	q.Changes = nil
	var kept []Refused
	for _, c := range p.Changes {
		if !c.ModeOnly && c.seen.known && !c.seen.absent && !c.seen.isDir() && !held[c.Path] {
			kept = append(kept, Refused{c.Path, why})
			continue
		}
		q.Changes = append(q.Changes, c)
	}
	return &q, kept
}

// treeHolds says which of paths the tree holds as an entry of its own (not a
// directory). A few are given to git ls-tree as literal pathspecs (the hardening's
// --literal-pathspecs); past maxHeldPathspecs the whole tree is listed instead,
// since Git matches each entry against every pathspec.
func (s *Store) treeHolds(tree string, paths []string) (map[string]bool, error) {
	args := []string{"ls-tree", "-r", "-z", "--full-tree", "--name-only", tree}
	if len(paths) <= maxHeldPathspecs {
		args = append(append(args, "--"), paths...)
	}
	out, err := s.git.run(nil, args...)
	if err != nil {
		return nil, err
	}
	want := make(map[string]bool, len(paths))
	for _, p := range paths {
		want[p] = true
	}
	held := map[string]bool{}
	for name := range strings.SplitSeq(string(out), "\x00") {
		if want[name] {
			held[name] = true
		}
	}
	return held, nil
}

// maxHeldPathspecs is the most paths treeHolds names to Git (at most 4 KiB each:
// checkRecordPath), under the kernel's bound on one argument list.
const maxHeldPathspecs = 64

// putBack writes each change's start state into the working tree: first what the
// session added goes (deepest first), then the directories it made that this
// leaves empty, then what it changed or removed is written back in path order,
// parents first (made with their start bits), and last the directories it removed
// that nothing written back needed. Each path is replaced or removed only while it
// is what the plan saw (recheck.go).
func (s *Store) putBack(p *UndoPlan) (done int, failed []Refused) {
	changes := p.Changes
	root, err := openRepo(s.Repo)
	if err != nil {
		for _, c := range changes {
			failed = append(failed, Refused{c.Path, err.Error()})
		}
		return 0, failed
	}
	defer unix.Close(root)
	var adds, writes []Change
	for _, c := range changes {
		if c.ModeOnly {
			if err := chmodEntry(root, c.Path, c.Perm, c.seen); err != nil {
				failed = append(failed, Refused{c.Path, err.Error()})
				continue
			}
			done++
			continue
		}
		if c.From.Mode == "" {
			adds = append(adds, c)
		} else {
			writes = append(writes, c)
		}
	}
	sort.Slice(adds, func(i, j int) bool { return adds[i].Path > adds[j].Path })
	for _, c := range adds {
		if err := removeEntry(root, c.Path, c.seen); err != nil {
			failed = append(failed, Refused{c.Path, err.Error()})
			continue
		}
		done++
	}
	made := append([]DirChange(nil), p.DirsMade...)
	sort.Slice(made, func(i, j int) bool { return made[i].Path > made[j].Path })
	for _, d := range made {
		removeMadeDir(root, d)
	}
	for _, c := range writes {
		if err := s.writeEntry(root, p, c); err != nil {
			failed = append(failed, Refused{c.Path, err.Error()})
			continue
		}
		done++
	}
	for _, d := range p.DirsGone {
		if err := s.makeGoneDir(root, p, d); err != nil {
			failed = append(failed, Refused{d.Path + "/", err.Error()})
		}
	}
	return done, failed
}

// removeEntry removes the path p below root, which must not be a directory, if it
// is still what the plan saw (was). A parent that is a symlink or gone means the
// path is not there. The directories this leaves empty go only when the record
// names them as the session's (dirs.go).
func removeEntry(root int, p string, was seen) error {
	dir, name := splitPath(p)
	dfd, err := safepath.OpenBeneath(root, dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, safepath.ErrSymlink) {
			return nil
		}
		return err
	}
	defer unix.Close(dfd)
	now := seenAt(dfd, name)
	switch {
	case now.known && now.absent:
		return nil
	case now.known && now.st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return errors.New("is a directory now; left as it is")
	}
	return removeSeen(dfd, name, was)
}

// writeEntry makes the path c.Path below root hold c.From, if what is there is
// still what the plan saw: its parents made as directories (never through a
// symlink, with their start bits), the content written to a new file beside it,
// then exchanged with what is there (recheck.go). A regular file gets the record's
// bits, set with fchmod (the umask does not apply), or, from a record without
// them, the bits of the file it replaces with the executable bit the record gives.
func (s *Store) writeEntry(root int, p *UndoPlan, c Change) error {
	dir, name := splitPath(c.Path)
	e, was := c.From, c.seen
	dfd, err := mkdirs(root, dir, p.dirPerm)
	if err != nil {
		return fmt.Errorf("parent directory: %s", describeErr(err))
	}
	defer unix.Close(dfd)
	if !was.known {
		return ErrChangedSincePlan // the plan could not look: nothing is replaced unseen
	}
	perm := uint32(0o666) &^ umask()
	if was.isDir() {
		// A directory the session made where a file was: gone if empty (its files
		// were removed first, and it may have gone with them: dirs.go), else left.
		now := seenAt(dfd, name)
		switch {
		case now.known && now.absent:
		case !was.stillSeen(dfd, name):
			return ErrChangedSincePlan
		case unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR) != nil:
			return fmt.Errorf("is a directory now, not empty; left as it is")
		}
		was = seen{known: true, absent: true}
	} else if was.known && !was.absent && was.st.Mode&unix.S_IFMT == unix.S_IFREG {
		perm = was.st.Mode & 0o666
	}
	if e.Mode == "100755" {
		perm |= (perm & 0o444) >> 2
	}
	if c.Perm != 0 {
		perm = uint32(c.Perm & 0o777) // the record's, as the launch found it (perms.go)
	}
	// A name a session cannot guess: one planted there would stop the put-back.
	tmp, err := asideName()
	if err != nil {
		return err
	}
	switch e.Mode {
	case "120000":
		var target strings.Builder
		if err := s.readBlob(&target, e.OID, maxUndoLink); err != nil {
			return err
		}
		if err := unix.Symlinkat(target.String(), dfd, tmp); err != nil {
			return err
		}
	case "100644", "100755":
		if err := s.writeBlobAt(dfd, tmp, e.OID, perm); err != nil {
			return err
		}
	default:
		return fmt.Errorf("mode %s cannot be put back", e.Mode)
	}
	return replaceSeen(dfd, tmp, name, was)
}

// writeBlobAt writes blob oid into a new file name below dfd with mode perm.
func (s *Store) writeBlobAt(dfd int, name, oid string, perm uint32) error {
	fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	err = s.readBlob(f, oid, maxRecordFile)
	if err == nil {
		err = unix.Fchmod(fd, perm)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		unix.Unlinkat(dfd, name, 0)
	}
	return err
}

// readBlob writes the blob oid of the shadow repository to w, at most limit bytes.
func (s *Store) readBlob(w io.Writer, oid string, limit int64) error {
	lw := &limitWriter{w: w, left: limit}
	if err := s.git.stream(lw, "cat-file", "blob", oid); err != nil {
		return fmt.Errorf("read %s from the record: %w", oid, err)
	}
	if lw.over {
		return fmt.Errorf("blob %s is larger than undo writes", oid)
	}
	return nil
}

// limitWriter passes at most left bytes on and remembers being asked for more.
type limitWriter struct {
	w    io.Writer
	left int64
	over bool
}

func (l *limitWriter) Write(b []byte) (int, error) {
	if int64(len(b)) > l.left {
		l.over = true
		return 0, errors.New("over the bound")
	}
	l.left -= int64(len(b))
	return l.w.Write(b)
}

// umask is the process's file mode creation mask.
func umask() uint32 {
	m := unix.Umask(0o22)
	unix.Umask(m)
	return uint32(m)
}
