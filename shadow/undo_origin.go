package shadow

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
)

// A path the record says the session added may have been there before it: the
// start record holds no file the repository's .gitignore files matched at launch,
// and a session that stops ignoring one (a .env, a local database) makes it look
// added at the end. Removing it would delete what the record never held. So a
// path added whose inode is older than the session is kept unless --force, except
// when its content is one the undo puts back elsewhere (a file the session renamed
// or linked: nothing is lost).

// startedBefore says why the path p below root, which the record says was added,
// is not the session's to remove ("" when it is): its inode was born (without a
// birth time: last changed) before start.
func startedBefore(root int, p string, start time.Time) string {
	if start.IsZero() {
		return ""
	}
	dir, name := splitPath(p)
	dfd, err := safepath.OpenBeneath(root, dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return ""
	}
	defer unix.Close(dfd)
	var stx unix.Statx_t
	if unix.Statx(dfd, name, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_SYNC_AS_STAT, unix.STATX_BTIME|unix.STATX_CTIME, &stx) != nil {
		return ""
	}
	born := stx.Ctime
	if stx.Mask&unix.STATX_BTIME != 0 {
		born = stx.Btime
	}
	// The kernel stamps inodes from its coarse clock, which lags time.Now() by up
	// to a tick: a file the session made just after start can read as born before.
	if !time.Unix(born.Sec, int64(born.Nsec)).Before(start.Add(-coarseTick())) {
		return ""
	}
	return "older than the session: there before it but left out of its start record (ignored then?), or renamed and edited by it; --force removes it"
}

// putBackContent is the content (blob ids) the changes write back somewhere.
func putBackContent(cs []Change) map[string]bool {
	ids := map[string]bool{}
	for _, c := range cs {
		if c.From.Mode != "" && !c.ModeOnly {
			ids[c.From.OID] = true
		}
	}
	return ids
}

// coarseTick is the resolution of the clock file times come from (one jiffy,
// CLOCK_REALTIME_COARSE), 10 ms where it cannot be read (HZ=100's tick).
func coarseTick() time.Duration {
	var ts unix.Timespec
	if unix.ClockGetres(unix.CLOCK_REALTIME_COARSE, &ts) != nil || ts.Nano() <= 0 {
		return 10 * time.Millisecond
	}
	return time.Duration(ts.Nano())
}
