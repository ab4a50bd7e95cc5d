package shadow

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// The recheck between an undo's plan and its writes. The plan compares each path
// with the session's end and remembers what it found there (seen); the writes come
// later (the tree is recorded and audited first), and meanwhile another process —
// the user, a session of a repository around this one, a Go API session without a
// journal — may change a path. Undo never replaces or removes what the plan did not
// see: the object at the path is moved aside in one rename (an exchange with the
// new content, or a rename to a random name), compared with seen, and only then
// dropped; one that differs is put back where it was and the path is reported.

// ErrChangedSincePlan: the path is not what the plan saw; it is left as it is.
var ErrChangedSincePlan = errors.New("changed while undo ran (after it compared it with the record); left as it is")

// seen is what the plan found at a path.
type seen struct {
	known  bool // false: the plan could not look (undo writes nothing there)
	absent bool
	st     unix.Stat_t
	// oid is the blob id of the regular file's content as the plan read it (""
	// when it did not): timestamps have the kernel's tick as their grain, and a
	// write of the same size in that tick leaves the stat as it was.
	oid string
}

// seenAt is what is at name below dfd now.
func seenAt(dfd int, name string) seen {
	var st unix.Stat_t
	switch err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil:
		return seen{known: true, st: st}
	case errors.Is(err, unix.ENOENT):
		return seen{known: true, absent: true}
	default:
		return seen{}
	}
}

// sameAs reports whether st is the object the plan saw: the same inode, type,
// bits, size and times. withCtime false leaves the ctime out, for an object undo
// itself has just renamed (a rename sets it). A directory is the same inode of
// the same type: undo itself empties it of what the session added, and a
// directory is only ever removed empty.
func (s seen) sameAs(st *unix.Stat_t, withCtime bool) bool {
	p := &s.st
	if !s.known || s.absent || p.Dev != st.Dev || p.Ino != st.Ino || p.Mode&unix.S_IFMT != st.Mode&unix.S_IFMT {
		return false
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return true
	}
	if p.Mode != st.Mode || p.Size != st.Size || p.Mtim != st.Mtim {
		return false
	}
	if p.Nlink > 1 {
		// Another name of the file may be one undo itself removes or replaces
		// (a session's hard link), which sets this one's ctime and link count.
		return true
	}
	return p.Nlink == st.Nlink && (!withCtime || p.Ctim == st.Ctim)
}

// isDir: the plan saw a directory.
func (s seen) isDir() bool {
	return s.known && !s.absent && s.st.Mode&unix.S_IFMT == unix.S_IFDIR
}

// sameContent reports whether the regular file name below dfd (st: its stat)
// holds what the plan read, where it read it.
func (s seen) sameContent(dfd int, name string, st *unix.Stat_t) bool {
	if s.oid == "" || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return true
	}
	id, err := fileBlobID(dfd, name, st.Size)
	return err == nil && id == s.oid
}

// stillSeen reports whether what is at name below dfd now is what the plan saw.
func (s seen) stillSeen(dfd int, name string) bool {
	now := seenAt(dfd, name)
	if !s.known || !now.known {
		return false
	}
	if s.absent || now.absent {
		return s.absent == now.absent
	}
	return s.sameAs(&now.st, true)
}

// asideName is a name in the same directory no session can guess.
func asideName() (string, error) {
	var rnd [8]byte
	if _, err := unix.Getrandom(rnd[:], 0); err != nil {
		return "", err
	}
	return fmt.Sprintf(".agentbox-undo-%x", rnd), nil
}

// replaceSeen renames tmp (undo's new entry) over name below dfd, if what is at
// name is still what the plan saw; else tmp is removed and ErrChangedSincePlan
// returned.
func replaceSeen(dfd int, tmp, name string, was seen) error {
	drop := func(err error) error {
		unix.Unlinkat(dfd, tmp, 0)
		return err
	}
	if !was.stillSeen(dfd, name) {
		return drop(ErrChangedSincePlan)
	}
	if was.absent {
		// Nothing was there: nothing may be replaced.
		err := unix.Renameat2(dfd, tmp, dfd, name, unix.RENAME_NOREPLACE)
		if errors.Is(err, unix.EEXIST) {
			return drop(ErrChangedSincePlan)
		}
		if errors.Is(err, unix.EINVAL) { // no RENAME_NOREPLACE here: the check above stands
			err = unix.Renameat(dfd, tmp, dfd, name)
		}
		if err != nil {
			return drop(err)
		}
		return nil
	}
	// Exchanged, the old entry is at tmp, out of everyone's way: checked there
	// again, it goes; one that changed since the check above comes back.
	err := unix.Renameat2(dfd, tmp, dfd, name, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.EINVAL) { // no exchange on this filesystem
		if now := seenAt(dfd, name); !now.known || !was.sameContent(dfd, name, &now.st) {
			return drop(ErrChangedSincePlan)
		}
		if err = unix.Renameat(dfd, tmp, dfd, name); err != nil {
			return drop(err)
		}
		return nil
	}
	if err != nil {
		return drop(err)
	}
	var st unix.Stat_t
	if unix.Fstatat(dfd, tmp, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || !was.sameAs(&st, false) || !was.sameContent(dfd, tmp, &st) {
		if unix.Renameat2(dfd, tmp, dfd, name, unix.RENAME_EXCHANGE) == nil {
			return drop(ErrChangedSincePlan)
		}
		return fmt.Errorf("changed while undo ran; what was there is kept as %s beside it", tmp)
	}
	return removeAside(dfd, tmp, &st)
}

// removeSeen removes name below dfd (not a directory) if it is still what the plan
// saw: moved aside first, checked there, then unlinked.
func removeSeen(dfd int, name string, was seen) error {
	if !was.stillSeen(dfd, name) {
		return ErrChangedSincePlan
	}
	tmp, err := asideName()
	if err != nil {
		return err
	}
	err = unix.Renameat2(dfd, name, dfd, tmp, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) {
		err = unix.Renameat(dfd, name, dfd, tmp)
	}
	if errors.Is(err, unix.ENOENT) {
		return ErrChangedSincePlan
	}
	if err != nil {
		return err
	}
	var st unix.Stat_t
	if unix.Fstatat(dfd, tmp, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || !was.sameAs(&st, false) || !was.sameContent(dfd, tmp, &st) {
		if unix.Renameat2(dfd, tmp, dfd, name, unix.RENAME_NOREPLACE) == nil {
			return ErrChangedSincePlan
		}
		return fmt.Errorf("changed while undo ran; what was there is kept as %s beside it", tmp)
	}
	return removeAside(dfd, tmp, &st)
}

// removeAside unlinks what undo moved aside (st: its stat), a directory with
// rmdir (an empty one the session made where a file was).
func removeAside(dfd int, tmp string, st *unix.Stat_t) error {
	flags := 0
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		flags = unix.AT_REMOVEDIR
	}
	if err := unix.Unlinkat(dfd, tmp, flags); err != nil {
		return fmt.Errorf("what was there is kept as %s beside it: %w", tmp, err)
	}
	return nil
}
