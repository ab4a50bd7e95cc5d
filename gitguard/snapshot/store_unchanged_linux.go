package snapshot

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
)

// A save of metadata that has not changed since the last record writes nothing: it
// names that record again (Snapshot.Unchanged). Most launches find .git as the last
// one left it, and a new record there cost a small repository's launch more than
// anything else the snapshot did: the walk's trees and their blob checks, the
// record, and retention with its periodic collection (docs/performance.md).
//
// Telling that nothing changed takes one lstat per entry, from the walk's listing
// kept in the file "unchanged": every directory, file and symlink the save that
// wrote the record visited, with its device, inode and ctime. Why equal ctimes are
// enough (as for the stat cache): every change to an entry — content, mode, owner,
// times set by utimensat — sets its ctime from the kernel's clock, and nothing can
// set a ctime back; a directory's ctime changes with every entry created, removed or
// renamed in it, so a directory whose ctime is unchanged holds the names it held,
// and the listing names them all. An entry whose ctime was within racyWindow of the
// save that listed it could still change within the same clock tick: such a save
// keeps no listing, and so does one that left anything out (a special file, a bound
// hit), whose record does not describe the whole of .git. A listing is used only
// when read whole: it ends with its entry count, and one larger than the read bound
// is neither kept nor read (read up to the bound, it would vouch for every entry
// past it unchecked, and long names in .git can put the bound on any line's end).
//
// What a ctime cannot show, here as for the stat cache and Git's own: writes
// through a shared mapping to a page that was already dirty (the first write to a
// clean page sets the ctime, later ones to it do not until writeback). A session
// that keeps a writable mapping of a file in .git open while a second session
// launches can change that file again, unseen by the second session's snapshot and
// by the next one.

const unchangedFile = "unchanged"

// listing collects the entries a walk visits, for the "unchanged" file.
type listing struct {
	b     bytes.Buffer
	n     int  // entries listed
	clean bool // every entry visited is listed, none within the racy window
	start time.Time
}

func newListing(start time.Time) *listing {
	return &listing{clean: true, start: start}
}

// add lists the entry at path with its stat, or makes the listing unusable when the
// entry changed too recently to be trusted by its ctime.
func (l *listing) add(path string, st *unix.Stat_t) {
	if l == nil || !l.clean {
		return
	}
	if !settled(st.Ctim.Nano(), l.start) {
		l.clean = false
		return
	}
	l.n++
	fmt.Fprintf(&l.b, "e %d %d %d %d %s\n", st.Mode&unix.S_IFMT, st.Dev, st.Ino, st.Ctim.Nano(), strconv.Quote(path))
}

// spoil makes the listing unusable: the walk left an entry out.
func (l *listing) spoil() {
	if l != nil {
		l.clean = false
	}
}

// layoutLine names what the listing was taken of: the layout and the version that
// wrote the record, which are part of it.
func layoutLine(l layout, version string) string {
	return "layout " + strconv.Quote(l.gitDir) + " " + strconv.Quote(l.commonDir) + " " + strconv.Quote(l.dotGit) + " " + strconv.Quote(version) + "\n"
}

// saveListing replaces the "unchanged" file after a save that published record, or
// removes it when the walk's listing cannot vouch for that record.
func (rs *repoStore) saveListing(ls *listing, l layout, version, record string) {
	p := filepath.Join(rs.dir, unchangedFile)
	if ls == nil || !ls.clean {
		os.Remove(p)
		return
	}
	var b bytes.Buffer
	b.WriteString("record " + strconv.Quote(filepath.Base(record)) + "\n")
	b.WriteString(layoutLine(l, version))
	b.Write(ls.b.Bytes())
	// The last line says how many entries come before it: a listing cut short (a
	// torn write) never vouches for its record. One that would not be read back
	// whole is not kept.
	fmt.Fprintf(&b, "end %d\n", ls.n)
	if int64(b.Len()) > maxListing {
		os.Remove(p)
		return
	}
	if err := writeFileNoSync(p, b.Bytes()); err != nil {
		os.Remove(p)
	}
}

// maxListing bounds the "unchanged" file read back; a larger one is not used.
var maxListing int64 = 64 << 20 // a var: tests lower it

// unchangedRecord returns the record the "unchanged" file vouches for when every
// entry it lists is as it was, and the record is still there and readable; ok is
// false whenever anything differs or cannot be read (the save then walks).
func (rs *repoStore) unchangedRecord(l layout, version string) (path string, rec *Record, ok bool) {
	f, err := safepath.OpenRegular(filepath.Join(rs.dir, unchangedFile))
	if err != nil {
		return "", nil, false
	}
	defer f.Close()
	// Read whole or not at all: a listing past the bound, read up to it, would
	// vouch for everything after the bound unchecked.
	if fi, err := f.Stat(); err != nil || fi.Size() > maxListing {
		return "", nil, false
	}
	sc := bufio.NewScanner(io.LimitReader(f, maxListing))
	sc.Buffer(make([]byte, 0, 16<<10), 1<<20)
	if !sc.Scan() {
		return "", nil, false
	}
	name, ok := strings.CutPrefix(sc.Text(), "record ")
	if !ok {
		return "", nil, false
	}
	if name, err = strconv.Unquote(name); err != nil || name != filepath.Base(name) || !strings.HasSuffix(name, RecordSuffix) {
		return "", nil, false
	}
	if !sc.Scan() || sc.Text()+"\n" != layoutLine(l, version) {
		return "", nil, false
	}
	entries, ended := 0, false
	for sc.Scan() {
		if n, ok := strings.CutPrefix(sc.Text(), "end "); ok {
			ended = n == strconv.Itoa(entries)
			break
		}
		if !entryUnchanged(sc.Text()) {
			return "", nil, false
		}
		entries++
	}
	if !ended || sc.Scan() || sc.Err() != nil || entries == 0 {
		return "", nil, false
	}
	path = filepath.Join(rs.dir, "snaps", name)
	if rec, err = readRecord(path); err != nil {
		return "", nil, false
	}
	return path, rec, true
}

// entryUnchanged reads one "e TYPE DEV INO CTIME QUOTED-PATH" line and reports
// whether the entry is still that inode with that ctime.
func entryUnchanged(line string) bool {
	rest, ok := strings.CutPrefix(line, "e ")
	if !ok {
		return false
	}
	var f [4]string
	path, ok := cutFields(rest, f[:])
	if !ok || !filepath.IsAbs(path) {
		return false
	}
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil {
		return false
	}
	return f[0] == strconv.FormatUint(uint64(st.Mode&unix.S_IFMT), 10) &&
		f[1] == strconv.FormatUint(st.Dev, 10) &&
		f[2] == strconv.FormatUint(st.Ino, 10) &&
		f[3] == strconv.FormatInt(st.Ctim.Nano(), 10)
}
