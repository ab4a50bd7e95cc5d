// Package treewalk holds what one walk of a working tree saw: every entry with its
// type and ctime, and the clock read just before the walk began. The audit takes
// the walk (audit.Scan with ScanOptions.Walk) and the shadow recorder reuses it
// to find what changed, so that a session end walks the working tree once.
//
// It is data only; the walking is gitguard's, the use shadow's.
package treewalk

// Entry is one working-tree entry.
type Entry struct {
	Rel   string // path relative to the top of the working tree, '/'-separated
	Mode  uint32 // the file type: st_mode & S_IFMT
	Ctime int64  // st_ctime in nanoseconds since the epoch
	// Ino is st_ino's low 32 bits (what Git's index keeps): a directory renamed into
	// place brings entries whose ctimes are old but whose inodes are not the ones
	// the index holds at their paths.
	Ino uint32
	// Nested: a directory holding a .git entry, which Git records as a nested
	// repository (its commit); nothing below it is listed.
	Nested bool
	// Perm is st_mode's permission bits (& 07777): undo puts a file's back exactly
	// as the launch walk found them (shadow/perms.go).
	Perm uint16
}

// IsDir reports whether e is a directory (not a symlink to one).
func (e Entry) IsDir() bool { return e.Mode == ModeDir }

// ModeDir is S_IFDIR.
const ModeDir = 0o040000

// Walk is one walk of a working tree.
type Walk struct {
	// Clock is read before the walk's first lstat: every change made after that
	// moment has a ctime at or after Clock.Real (see Clock).
	Clock   Clock
	Entries []Entry // in walk order: a directory before what it holds
	// RootCtime is the ctime of the top of the working tree (which Entries do not
	// hold): an entry added to or removed from it changes it.
	RootCtime int64
	// Complete is false when the walk missed part of the tree (an entry or depth
	// bound, a directory that could not be listed, an entry that could not be
	// lstat'ed): then it cannot stand for the tree.
	Complete bool
	// FineCtime: some entry's ctime has a non-zero nanosecond part, so the
	// filesystem stamps finer than whole seconds.
	FineCtime bool
}

// Clock is the time as the kernel stamps ctimes, with what tells a clock step.
type Clock struct {
	// Real is CLOCK_REALTIME_COARSE, in ns: the kernel stamps ctime from the coarse
	// clock (or, with multigrain timestamps, from a finer one, never earlier), so a
	// change made after Real was read has a ctime >= Real — unless the clock is set
	// back meanwhile, which Boot tells.
	Real int64
	// Boot is CLOCK_BOOTTIME in ns: it never steps, so Real's advance against it
	// shows a step of the wall clock.
	Boot int64
	// BootID is the kernel's boot id: across a reboot Boot means nothing.
	BootID string
}

// stepSlack is how much the wall clock may seem to fall behind the boot clock
// between two readings before it counts as set back: the two clocks of one
// reading are read one after the other, and the coarse one lags by a tick.
const stepSlack = 50_000_000 // 50 ms

// Since returns the ctime threshold for changes made since c, seen from now: a
// ctime at or after it may be a change made after c was read. ok is false when no
// threshold is sound: another boot, or a wall clock set back meanwhile (files
// changed after the step would carry ctimes before c). fine says the filesystem
// stamps finer than seconds; if not, the threshold leaves two seconds' margin.
func Since(c, now Clock, fine bool) (threshold int64, ok bool) {
	if c.BootID == "" || c.BootID != now.BootID || c.Real == 0 {
		return 0, false
	}
	if now.Real-c.Real < now.Boot-c.Boot-stepSlack {
		return 0, false
	}
	margin := int64(stepSlack)
	if !fine {
		margin = 2_000_000_000
	}
	return c.Real - margin, true
}
