package widen

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/flock"
	"github.com/agentbox/agentbox/internal/safepath"
)

// The journal of widened modes (Relaxer.Journal). A launcher killed between a
// widen and its restore left the owner bits it added; two audits widening the
// same directory each took the other's widened mode for the original, and the
// last to restore put back a widened one. So, before a chmod, the original mode
// is written to JOURNAL/e-DEV-INO under JOURNAL/lock, with the holder that
// widened it; a later widener of the same inode takes the original from there
// and adds itself. A holder is a file JOURNAL/h-ID the Relaxer keeps locked
// (flock) while it has modes widened: its death releases the lock. The last
// live holder to restore puts the journaled original back; Recover does it for
// holders that died.

// lockWait bounds the wait for the journal's lock: its holders do a few system
// calls under it.
const lockWait = 10 * time.Second

// entry is one widened inode as the journal keeps it.
type entry struct {
	Path string `json:"path"` // where it was widened, for Recover
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino"`
	// Birth is the inode's birth time (statx), 0 where the filesystem keeps none:
	// ext4 and XFS give a removed inode's number to the next file made, so device
	// and inode alone would take a file made at the path since for the one widened.
	Birth   int64    `json:"birth,omitempty"`
	Orig    uint32   `json:"orig"`    // permission bits before any holder widened them
	Set     uint32   `json:"set"`     // the bits the last widener set
	Holders []string `json:"holders"` // the Relaxers that widened it and have not restored
}

func entryName(dev, ino uint64) string {
	return "e-" + strconv.FormatUint(dev, 10) + "-" + strconv.FormatUint(ino, 10)
}

var holderSeq atomic.Int64

// journal is a Relaxer's handle on its journal directory.
type journal struct {
	dir    string
	id     string   // this Relaxer's holder name
	holder *os.File // JOURNAL/h-ID, locked while the Relaxer has modes widened
}

// lock takes the journal directory's lock; unlock releases it.
func lockJournal(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	if err := flock.Wait(f, lockWait); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// hold makes j's holder file, locked, once.
func (j *journal) hold() error {
	if j.holder != nil {
		return nil
	}
	j.id = strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-" + strconv.FormatInt(holderSeq.Add(1), 10)
	f, err := os.OpenFile(filepath.Join(j.dir, "h-"+j.id), os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return err
	}
	j.holder = f
	return nil
}

// release removes j's holder file once it has restored everything.
func (j *journal) release() {
	if j.holder == nil {
		return
	}
	os.Remove(filepath.Join(j.dir, "h-"+j.id))
	j.holder.Close()
	j.holder = nil
}

// alive reports whether the holder id still holds its lock: a holder of this
// process counts too (flock is per open file).
func alive(dir, id string) bool {
	f, err := os.OpenFile(filepath.Join(dir, "h-"+id), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	return unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB) != nil
}

func readEntry(dir, name string) (*entry, error) {
	f, err := safepath.OpenRegular(filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var e entry
	if err := json.NewDecoder(f).Decode(&e); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &e, nil
}

// writeEntry replaces the entry's file: written aside, synced, renamed in.
func writeEntry(dir string, e *entry) error {
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	name := entryName(e.Dev, e.Ino)
	tmp := filepath.Join(dir, ".tmp-"+name)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// liveHolders drops from e the holders that died, and the one named drop.
func (e *entry) liveHolders(dir, drop string) {
	live := e.Holders[:0]
	for _, h := range e.Holders {
		if h != drop && alive(dir, h) {
			live = append(live, h)
		}
	}
	e.Holders = live
}

// widen chmods the inode open (O_PATH) at fd, seen as st, to st's bits|need,
// journaled first: the original is the journal's when another live holder
// widened it already. It returns the bits set.
func (j *journal) widen(fd int, path string, st *unix.Stat_t, need uint32) (set uint32, err error) {
	unlock, err := lockJournal(j.dir)
	if err != nil {
		return 0, err
	}
	defer unlock()
	if err := j.hold(); err != nil {
		return 0, err
	}
	// Fresh under the lock: another holder may have widened it meanwhile.
	if err := unix.Fstat(fd, st); err != nil {
		return 0, err
	}
	cur := st.Mode & 0o7777
	born := birth(fd)
	e, err := readEntry(j.dir, entryName(st.Dev, st.Ino))
	switch {
	case errors.Is(err, os.ErrNotExist):
		e = &entry{Dev: st.Dev, Ino: st.Ino, Birth: born, Orig: cur}
	case err != nil:
		return 0, err
	default:
		e.liveHolders(j.dir, "")
		switch {
		case len(e.Holders) == 0 && !e.sameBirth(born):
			// A dead holder's entry about a removed inode whose number this
			// one was given: nothing of it applies here.
			e = &entry{Dev: st.Dev, Ino: st.Ino, Birth: born, Orig: cur}
		case len(e.Holders) == 0 && cur != e.Set:
			// A dead holder's entry, not yet recovered, whose mode was changed
			// since: that is the mode to put back. Unchanged, its original stands.
			e.Orig = cur
		}
	}
	if cur&need == need {
		return 0, nil
	}
	e.Path, e.Set = path, cur|need
	e.Holders = append(e.Holders, j.id)
	if err := writeEntry(j.dir, e); err != nil {
		return 0, err
	}
	if err := unix.Chmod(fdLink(fd), e.Set); err != nil {
		e.liveHolders(j.dir, j.id)
		j.finish(e)
		return 0, err
	}
	return e.Set, nil
}

// restore ends j's hold of the inode (dev, ino), open at fd (-1: no longer
// found): the last live holder puts the journaled original back, where the mode
// is still the one the last widener set.
func (j *journal) restore(fd int, dev, ino uint64) {
	unlock, err := lockJournal(j.dir)
	if err != nil {
		return
	}
	defer unlock()
	e, err := readEntry(j.dir, entryName(dev, ino))
	if err != nil {
		return
	}
	e.liveHolders(j.dir, j.id)
	if len(e.Holders) > 0 {
		_ = writeEntry(j.dir, e)
		return
	}
	var st unix.Stat_t
	if fd >= 0 && unix.Fstat(fd, &st) == nil && st.Dev == dev && st.Ino == ino && e.sameBirth(birth(fd)) && st.Mode&0o7777 == e.Set {
		_ = unix.Chmod(fdLink(fd), e.Orig)
	}
	j.finish(e)
}

// finish writes e back, or removes it when no holder is left.
func (j *journal) finish(e *entry) {
	if len(e.Holders) > 0 {
		_ = writeEntry(j.dir, e)
		return
	}
	os.Remove(filepath.Join(j.dir, entryName(e.Dev, e.Ino)))
}

// Recover puts back the modes that Relaxers journaling to dir widened and did
// not restore because their process died: each entry none of whose holders is
// alive, where the path still leads (no symlink on the way) to the same inode
// with the mode its last widener set. It removes those entries and the dead
// holders' files, and returns the paths whose modes it put back.
func Recover(dir string) (restored []string) {
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) == 0 || len(ents) == 1 && ents[0].Name() == "lock" {
		return nil // nothing widened: every launch looks, so it takes no lock for that
	}
	unlock, err := lockJournal(dir)
	if err != nil {
		return nil
	}
	defer unlock()
	for _, de := range ents {
		name := de.Name()
		switch {
		case strings.HasPrefix(name, "h-"):
			if !alive(dir, strings.TrimPrefix(name, "h-")) {
				os.Remove(filepath.Join(dir, name))
			}
			continue
		case !strings.HasPrefix(name, "e-"):
			continue
		}
		e, err := readEntry(dir, name)
		if err != nil {
			continue
		}
		e.liveHolders(dir, "")
		if len(e.Holders) > 0 {
			continue
		}
		if putBack(e) {
			restored = append(restored, e.Path)
		}
		os.Remove(filepath.Join(dir, name))
	}
	return restored
}

// putBack chmods e's path back to its original mode where it is still e's inode
// with the mode e's last widener set.
func putBack(e *entry) bool {
	fd, err := safepath.Open(e.Path, unix.O_PATH|unix.O_NOFOLLOW)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Dev != e.Dev || st.Ino != e.Ino || !e.sameBirth(birth(fd)) || st.Mode&0o7777 != e.Set {
		return false
	}
	return unix.Chmod(fdLink(fd), e.Orig) == nil
}

// birth is the birth time of the inode open at fd, 0 where it is not known.
func birth(fd int) int64 {
	var stx unix.Statx_t
	if unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BTIME, &stx) != nil || stx.Mask&unix.STATX_BTIME == 0 {
		return 0
	}
	return stx.Btime.Sec*1_000_000_000 + int64(stx.Btime.Nsec)
}

// sameBirth says whether an inode born at b may be e's: the same birth time, or
// one of the two unknown (a filesystem that keeps none, an entry written without).
func (e *entry) sameBirth(b int64) bool {
	return e.Birth == 0 || b == 0 || e.Birth == b
}
