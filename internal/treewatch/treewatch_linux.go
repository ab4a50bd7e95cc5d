// Package treewatch tells which directories of a working tree may have changed
// while a session ran, so that the session's end walk re-reads those and takes the
// launch walk's listing of every other one (gitguard/audit, ScanOptions.Watch and
// Since). It watches with fanotify, as an unprivileged user may since Linux 5.17:
// a mark on each directory, events on the directory and on its children, each
// event naming its directory and the inode it is about (FAN_REPORT_DFID_NAME,
// FAN_REPORT_FID, FAN_REPORT_TARGET_FID).
//
// What it promises: a directory of the tree whose mark saw no event kept its
// names, their types and their inodes, and no file reached through it was opened,
// written, truncated, chmod'ed or linked elsewhere. What it cannot see, it says
// (Changes.Lost): events lost in a full queue, an event about a directory it does
// not know, a file handle it cannot map to an inode. The caller then walks the
// whole tree, as without a watch.
//
// Why an open counts as a change: a write through a shared mapping sends no event,
// and the close that does (FAN_CLOSE_WRITE) can come late — after the session's
// processes are gone, when the last reference to the file was in flight in a Unix
// socket and the kernel's garbage collector drops it. The open comes before any
// such write, from the process that makes it. Opens by this process (the audit
// reading a .gitmodules) are not changes: an unprivileged listener sees only its
// own pid, and this process writes nothing in the tree.
//
// Do not use it where a change must be seen that no local process makes: a
// network filesystem, FUSE, an overlay. Add refuses every filesystem but a few
// local ones (localFS), and those whose file handles it cannot read
// (handleLayout); the caller then walks.
package treewatch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// atHandleFID (AT_HANDLE_FID, Linux 6.5) asks name_to_handle_at for the handle
// fanotify reports, which need not be one open_by_handle_at can use.
const atHandleFID = 0x200

// mask is what each directory's mark reports: every change to its entries and to
// the files they name, opens (see the package comment), and the directory itself
// moved or removed. FAN_ONDIR makes subdirectories' creations, removals and moves
// count, and also reports their opens, which are ignored.
const mask = unix.FAN_OPEN | unix.FAN_MODIFY | unix.FAN_ATTRIB | unix.FAN_CLOSE_WRITE |
	unix.FAN_CREATE | unix.FAN_DELETE | unix.FAN_MOVED_FROM | unix.FAN_MOVED_TO |
	unix.FAN_DELETE_SELF | unix.FAN_MOVE_SELF | unix.FAN_EVENT_ON_CHILD | unix.FAN_ONDIR

// Dir is one watched directory as Add found it.
type Dir struct {
	ID  int32  // names the directory in Changes
	Dev uint64 // st_dev and st_ino of the directory the mark is on
	Ino uint64
}

// Watch is a fanotify group marking the directories of one tree.
type Watch struct {
	f        *os.File
	self     int32
	done     chan struct{} // the reader stopped
	released chan struct{} // Stop's release of the group ended (Released)

	// peek serialises Snapshot; stopping and peeked tell the reader why its read
	// deadline passed (under mu).
	peek     sync.Mutex
	stopping bool
	peeked   chan struct{}

	mu      sync.Mutex
	dirs    map[string][]int32 // fsid+handle → the directories with that handle
	inoOf   []uint64           // by ID: the directory's inode
	layouts map[layoutKey]handleLayout
	ch      Changes
}

// Changes is what a Watch saw.
type Changes struct {
	// Lost says why the watch cannot vouch for anything; "" when it can.
	Lost  string
	dirty map[int32]bool
	// named: the directories whose names may have changed (Renamed).
	named map[int32]bool
	inos  map[uint64]bool
}

// Dirty reports whether the directory's entries (names, types, stats) may differ
// from what was read after its mark was placed.
func (c *Changes) Dirty(id int32) bool { return c.Lost != "" || c.dirty[id] }

// Renamed reports whether the directory's names, their types or the inodes they
// name may differ from what was read after its mark was placed: an entry came,
// went or moved, the directory itself was changed, moved or removed, or an event
// named it without saying which file it was about. A directory that is Dirty but
// not Renamed kept its names: only the stats of its entries whose inode is
// Touched may differ.
func (c *Changes) Renamed(id int32) bool { return c.Lost != "" || c.named[id] }

// Touched reports whether the inode whose number's low 32 bits are ino32 may
// have changed (it was opened, written, linked, or is a directory whose entries
// changed): a listing that holds it, under any name, must be read again. Low bits,
// as the walk keeps them: a collision only re-reads one more directory.
func (c *Changes) Touched(ino32 uint32) bool {
	return c.Lost != "" || c.inos[uint64(ino32)]
}

// Quiet reports whether the watch saw no change at all: every listing read after
// its mark is still true.
func (c *Changes) Quiet() bool { return c.Lost == "" && len(c.dirty) == 0 && len(c.inos) == 0 }

// AnyTouched reports whether Touched can be true for some inode.
func (c *Changes) AnyTouched() bool { return c.Lost != "" || len(c.inos) > 0 }

// New starts a watch. It fails where unprivileged fanotify with the needed
// reports is missing (before Linux 5.17) or its limits are reached; the caller
// then walks the whole tree.
func New() (*Watch, error) {
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_NOTIF|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK|
		unix.FAN_REPORT_DFID_NAME|unix.FAN_REPORT_FID|unix.FAN_REPORT_TARGET_FID, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fanotify_init: %w", err)
	}
	w := &Watch{
		f:       os.NewFile(uintptr(fd), "fanotify"),
		self:    int32(os.Getpid()),
		done:    make(chan struct{}),
		dirs:    map[string][]int32{},
		layouts: map[layoutKey]handleLayout{},
		ch:      Changes{dirty: map[int32]bool{}, named: map[int32]bool{}, inos: map[uint64]bool{}},
	}
	if noReader {
		close(w.done) // the test of Stop's own reading
	} else {
		go w.read()
	}
	return w, nil
}

// noReader starts no reader: Stop alone reads the queue (tests).
var noReader bool

// Add marks the open directory dirfd. The mark is in place when Add returns: what
// the caller reads of the directory after that is what Changes vouches for.
func (w *Watch) Add(dirfd int) (Dir, error) {
	var st unix.Stat_t
	if err := unix.Fstat(dirfd, &st); err != nil {
		return Dir{}, fmt.Errorf("fstat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return Dir{}, errors.New("not a directory")
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(dirfd, &sfs); err != nil {
		return Dir{}, fmt.Errorf("fstatfs: %w", err)
	}
	if !localFS(int64(sfs.Type)) {
		return Dir{}, fmt.Errorf("filesystem type %#x is not one whose every change a local event reports", sfs.Type)
	}
	h, _, err := unix.NameToHandleAt(dirfd, "", unix.AT_EMPTY_PATH|atHandleFID)
	if errors.Is(err, unix.EINVAL) { // before Linux 6.5: the export handle, the same for a directory on the filesystems handleLayout knows
		h, _, err = unix.NameToHandleAt(dirfd, "", unix.AT_EMPTY_PATH)
	}
	if err != nil {
		return Dir{}, fmt.Errorf("name_to_handle_at: %w", err)
	}
	fsid := fsidBytes(sfs.Fsid)
	key := handleKey(fsid, int32(h.Type()), h.Bytes())
	// Known before the mark is placed, so that its first event finds it.
	w.mu.Lock()
	id := int32(len(w.inoOf))
	w.inoOf = append(w.inoOf, st.Ino)
	w.dirs[key] = append(w.dirs[key], id)
	lerr := w.calibrate(layoutKey{fsid, int32(h.Type())}, h.Bytes(), st.Ino)
	w.mu.Unlock()
	if lerr != nil {
		return Dir{}, lerr
	}
	if err := unix.FanotifyMark(int(w.f.Fd()), unix.FAN_MARK_ADD, mask, dirfd, ""); err != nil {
		return Dir{}, fmt.Errorf("fanotify_mark: %w", err)
	}
	return Dir{ID: id, Dev: st.Dev, Ino: st.Ino}, nil
}

// Fail records that part of the tree could not be watched.
func (w *Watch) Fail(why string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lost(why)
}

// Stop reads every event queued so far and returns what it saw; the group is
// closed on a goroutine (Released waits for it). Events a process queues after
// Stop started may be missed: call it once the session's processes are gone.
func (w *Watch) Stop() *Changes {
	w.mu.Lock()
	w.stopping = true
	w.mu.Unlock()
	w.f.SetReadDeadline(time.Now())
	<-w.done
	w.drain()
	// Nothing is read from the group after the drain. Its release waits in the
	// kernel for the marks to be freed (an SRCU grace period in
	// fsnotify_destroy_group), from under a millisecond to tens of them on a
	// busy host: beside the end scan, not before it.
	w.released = make(chan struct{})
	go func() {
		defer close(w.released)
		w.f.Close()
	}()
	w.mu.Lock()
	defer w.mu.Unlock()
	ch := w.ch
	return &ch
}

// Released waits until Stop's release of the group has ended: no descriptor of
// the watch is left open after it. Without a Stop it returns at once.
func (w *Watch) Released() {
	if w.released != nil {
		<-w.released
	}
}

// Close stops the watch without looking at what it saw.
func (w *Watch) Close() {
	w.mu.Lock()
	w.stopping = true
	w.mu.Unlock()
	w.f.SetReadDeadline(time.Now())
	<-w.done
	w.f.Close()
}

// Snapshot returns what the watch saw so far, every event queued before the call
// included, and goes on watching: a checkpoint in the middle of a session takes
// the listings it vouches for, as the end scan does after Stop. The reader is
// woken by a read deadline and drains the queue itself (a second reader of the
// descriptor would wait for the first). After Stop or Close it returns what Stop
// saw, or a Changes that vouches for nothing.
func (w *Watch) Snapshot() *Changes {
	w.peek.Lock()
	defer w.peek.Unlock()
	done := make(chan struct{})
	w.mu.Lock()
	stopped := w.stopping
	if !stopped {
		w.peeked = done
	}
	w.mu.Unlock()
	if !stopped {
		w.f.SetReadDeadline(time.Now())
		select {
		case <-done:
		case <-w.done:
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.peeked = nil
	if w.stopping && w.ch.Lost == "" {
		return &Changes{Lost: "the watch was stopped"}
	}
	ch := Changes{Lost: w.ch.Lost}
	if ch.Lost == "" {
		ch.dirty, ch.named, ch.inos = maps.Clone(w.ch.dirty), maps.Clone(w.ch.named), maps.Clone(w.ch.inos)
	}
	return &ch
}

// read takes events as they come while the session runs, so that the kernel's
// queue (16,384 events) overflows only under a flood; an overflow is reported as
// lost, never ignored. A deadline set by Snapshot makes it drain the queue, say
// so and go on; one set by Stop or Close ends it.
func (w *Watch) read() {
	defer close(w.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if n > 0 {
			w.events(buf[:n])
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			w.Fail(fmt.Sprintf("reading fanotify events: %v", err))
			return
		}
		w.mu.Lock()
		peeked, stopping := w.peeked, w.stopping
		w.peeked = nil
		w.mu.Unlock()
		if stopping || peeked == nil {
			return
		}
		w.drain() // clears the deadline, then reads what is queued
		close(peeked)
		w.mu.Lock()
		stopping = w.stopping
		w.mu.Unlock()
		if stopping {
			return
		}
	}
}

// drain reads what is queued until the queue is empty.
func (w *Watch) drain() {
	rc, err := w.f.SyscallConn()
	if err != nil {
		w.Fail(fmt.Sprintf("reading fanotify events: %v", err))
		return
	}
	// The reader stopped at a deadline already past, which a raw read checks
	// before it reads anything: without clearing it, whatever the reader had not
	// taken yet would be left unread and the watch would vouch for it (the kernel
	// matrix's 6.1 cell, under TCG, lost a directory made just before Stop so).
	if err := w.f.SetReadDeadline(time.Time{}); err != nil {
		w.Fail(fmt.Sprintf("reading fanotify events: %v", err))
		return
	}
	buf := make([]byte, 64<<10)
	err = rc.Read(func(fd uintptr) bool {
		for {
			n, err := unix.Read(int(fd), buf)
			if n > 0 {
				w.events(buf[:n])
			}
			if err == unix.EINTR {
				continue
			}
			if err != nil && err != unix.EAGAIN {
				w.Fail(fmt.Sprintf("reading fanotify events: %v", err))
			}
			if err != nil || n <= 0 {
				return true
			}
		}
	})
	if err != nil {
		w.Fail(fmt.Sprintf("reading fanotify events: %v", err))
	}
}

const (
	metaLen  = int(unsafe.Sizeof(unix.FanotifyEventMetadata{}))
	infoHead = 4 + 8 + 8 // info_type, pad, len; fsid; handle_bytes, handle_type
)

// maxTouched bounds the inodes a watch remembers (Changes.Touched): a session
// that makes and removes files in a loop on a filesystem that never reuses inode
// numbers (tmpfs, btrfs) reports a new one each time, and would grow the
// launcher's heap for as long as it runs. Past it the watch vouches for nothing.
// A variable for the tests.
var maxTouched = 1 << 20

// events takes one read's worth of events.
func (w *Watch) events(b []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(b) > 0 && w.ch.Lost == "" { // once lost, the rest is only drained
		if len(b) < metaLen {
			w.lost("a short fanotify event")
			return
		}
		m := (*unix.FanotifyEventMetadata)(unsafe.Pointer(&b[0]))
		if m.Vers != unix.FANOTIFY_METADATA_VERSION || int(m.Event_len) < metaLen || int(m.Event_len) > len(b) || int(m.Metadata_len) > int(m.Event_len) {
			w.lost("a malformed fanotify event")
			return
		}
		w.event(m, b[m.Metadata_len:m.Event_len])
		b = b[m.Event_len:]
	}
}

// lost records that the watch vouches for nothing; what it remembered is freed
// (no event is read after: events).
func (w *Watch) lost(why string) {
	if w.ch.Lost == "" {
		w.ch.Lost = why
	}
	w.ch.dirty, w.ch.named, w.ch.inos = nil, nil, nil
}

// event takes one event: every directory it names may have changed, and so may
// every inode it is about.
func (w *Watch) event(m *unix.FanotifyEventMetadata, info []byte) {
	if m.Mask&unix.FAN_Q_OVERFLOW != 0 {
		w.lost("fanotify's queue overflowed: events were lost")
		return
	}
	if m.Fd >= 0 { // not asked for (FID reports carry none); never leak one
		unix.Close(int(m.Fd))
	}
	if m.Mask&^(unix.FAN_OPEN|unix.FAN_ONDIR) == 0 && (m.Mask&unix.FAN_ONDIR != 0 || m.Pid == w.self) {
		return // a directory read, or this process reading a file: nothing changed
	}
	// A directory made, or moved in, that this watch does not mark: a hard link
	// made in it to a file of a watched directory, and every open, write or chmod
	// through that link, reach no mark (the link's own ATTRIB goes to inode marks
	// only). Its parent's event says only that it appeared, and it may be gone
	// again by the end. Nothing can vouch for any listing's stats after that.
	newDir := m.Mask&unix.FAN_ONDIR != 0 && m.Mask&(unix.FAN_CREATE|unix.FAN_MOVED_TO) != 0
	movedWatched := false
	// The directories an event about one of their files named, and whether it
	// said which inode that was: if not, they count as renamed.
	var childOf [4]int32
	children, fid := childOf[:0], false
	for len(info) > 0 {
		if len(info) < infoHead {
			w.lost("a short fanotify event record")
			return
		}
		typ := info[0]
		n := int(binary.LittleEndian.Uint16(info[2:]))
		hlen := int(binary.LittleEndian.Uint32(info[12:]))
		if n < infoHead || n > len(info) {
			w.lost("a malformed fanotify event record")
			return
		}
		rec := info[:n]
		info = info[n:]
		switch typ {
		case unix.FAN_EVENT_INFO_TYPE_FID, unix.FAN_EVENT_INFO_TYPE_DFID, unix.FAN_EVENT_INFO_TYPE_DFID_NAME,
			unix.FAN_EVENT_INFO_TYPE_OLD_DFID_NAME, unix.FAN_EVENT_INFO_TYPE_NEW_DFID_NAME:
		default:
			continue
		}
		if infoHead+hlen > n {
			w.lost("a malformed fanotify file handle")
			return
		}
		var fsid [8]byte
		copy(fsid[:], rec[4:12])
		htype := int32(binary.LittleEndian.Uint32(rec[16:]))
		handle := rec[infoHead : infoHead+hlen]
		if typ == unix.FAN_EVENT_INFO_TYPE_FID && newDir && m.Mask&unix.FAN_CREATE == 0 {
			movedWatched = len(w.dirs[handleKey(fsid, htype, handle)]) > 0
		}
		if typ == unix.FAN_EVENT_INFO_TYPE_FID {
			// The inode the event is about (a file, or the target of an entry
			// event): wherever else it has a name, that listing is stale too.
			ino, ok := w.decode(layoutKey{fsid, htype}, handle)
			if !ok {
				w.lost("a fanotify event about a file whose handle cannot be read")
				return
			}
			w.ch.inos[ino&0xffffffff] = true
			fid = true
			if len(w.ch.inos) > maxTouched {
				w.lost("more files changed than the watch keeps track of")
				return
			}
			continue
		}
		ids := w.dirs[handleKey(fsid, htype, handle)]
		if len(ids) == 0 {
			w.lost("a fanotify event about a directory that was not watched")
			return
		}
		// The directory's own stat changed when an entry came, went or moved, or
		// when the event is about the directory itself (its name is "."): then the
		// listing that holds it is stale too. A file's write or chmod leaves its
		// directory's stat as it was.
		self := typ == unix.FAN_EVENT_INFO_TYPE_DFID || recordName(rec[infoHead+hlen:]) == "."
		for _, id := range ids {
			w.ch.dirty[id] = true
			if self || m.Mask&entryEvents != 0 {
				w.ch.inos[w.inoOf[id]&0xffffffff] = true
				w.ch.named[id] = true
			} else {
				children = append(children, id)
			}
		}
	}
	if !fid {
		for _, id := range children {
			w.ch.named[id] = true
		}
	}
	if newDir && !movedWatched {
		w.lost("a directory was made or moved in that is not watched: a hard link in it would not be seen")
	}
}

// entryEvents change a directory's entries, and so its ctime.
const entryEvents = unix.FAN_CREATE | unix.FAN_DELETE | unix.FAN_MOVED_FROM | unix.FAN_MOVED_TO

// recordName is the NUL-terminated name after a DFID_NAME record's handle.
func recordName(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// localFS reports whether a filesystem type is one whose files change only
// through this kernel, so that every change sends an event: not a network or FUSE
// filesystem (another machine, or a daemon reading a directory the sandbox writes
// by another path, changes them unseen), nor an overlay (its lower and upper
// layers are other inodes, writable by other paths). A switch, not a map: the
// sandbox's init runs every package's initialisation.
func localFS(t int64) bool {
	switch t {
	case unix.EXT4_SUPER_MAGIC, // ext2, ext3 and ext4 share it
		unix.XFS_SUPER_MAGIC, unix.BTRFS_SUPER_MAGIC, unix.TMPFS_MAGIC, unix.F2FS_SUPER_MAGIC:
		return true
	}
	return false
}

type layoutKey struct {
	fsid  [8]byte
	htype int32
}

// handleLayout is where a filesystem's file handle keeps the inode number. The
// kernel's handles are each filesystem's own; these are the ones of ext2/3/4, xfs,
// f2fs and other users of the generic 32-bit encoding (the number first), of the
// generic 64-bit one and btrfs (a 64-bit number first), and of tmpfs (generation
// first, then the number in two halves).
type handleLayout int

const (
	layoutUnknown handleLayout = iota
	layoutIno32
	layoutIno64
	layoutGenIno64
	layoutNone // no layout matched this filesystem's handles
)

func (l handleLayout) ino(h []byte) (uint64, bool) {
	switch {
	case l == layoutIno32 && len(h) >= 4:
		return uint64(binary.LittleEndian.Uint32(h)), true
	case l == layoutIno64 && len(h) >= 8:
		return binary.LittleEndian.Uint64(h), true
	case l == layoutGenIno64 && len(h) >= 12:
		return uint64(binary.LittleEndian.Uint32(h[4:])) | uint64(binary.LittleEndian.Uint32(h[8:]))<<32, true
	}
	return 0, false
}

// calibrate learns, from a directory whose inode number is known, which layout
// this filesystem's handles of this type use, and checks that it holds for every
// directory added after. A filesystem that fits none cannot be watched.
func (w *Watch) calibrate(k layoutKey, h []byte, ino uint64) error {
	if l := w.layouts[k]; l != layoutUnknown {
		if got, ok := l.ino(h); l == layoutNone || !ok || got != ino {
			w.layouts[k] = layoutNone
			return errors.New("this filesystem's file handles do not give inode numbers treewatch can read")
		}
		return nil
	}
	for _, l := range []handleLayout{layoutIno32, layoutIno64, layoutGenIno64} {
		if got, ok := l.ino(h); ok && got == ino {
			w.layouts[k] = l
			return nil
		}
	}
	w.layouts[k] = layoutNone
	return errors.New("this filesystem's file handles do not give inode numbers treewatch can read")
}

// decode is the inode number in an event's handle, by the layout its filesystem
// and handle type were calibrated with. A generic 64-bit handle (FILEID_INO64_GEN,
// what fanotify reports on filesystems with no handles of their own) is read as
// such even on a filesystem whose directories use another type.
func (w *Watch) decode(k layoutKey, h []byte) (uint64, bool) {
	l := w.layouts[k]
	if l == layoutUnknown && k.htype == fileidIno64Gen && w.knownFS(k.fsid) {
		l = layoutIno64
	}
	if l == layoutNone {
		return 0, false
	}
	return l.ino(h)
}

// fileidIno64Gen is FILEID_INO64_GEN.
const fileidIno64Gen = 0x81

func (w *Watch) knownFS(fsid [8]byte) bool {
	for k, l := range w.layouts {
		if k.fsid == fsid && l != layoutNone {
			return true
		}
	}
	return false
}

func fsidBytes(f unix.Fsid) [8]byte {
	var b [8]byte
	binary.LittleEndian.PutUint32(b[0:], uint32(f.Val[0]))
	binary.LittleEndian.PutUint32(b[4:], uint32(f.Val[1]))
	return b
}

func handleKey(fsid [8]byte, htype int32, h []byte) string {
	k := make([]byte, 0, 12+len(h))
	k = append(k, fsid[:]...)
	k = binary.LittleEndian.AppendUint32(k, uint32(htype))
	return string(append(k, h...))
}
