package grantledger

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/flock"
	"golang.org/x/sys/unix"
)

// maxBytes bounds the ledger: some 20,000 directories of 50 bytes. Past it a
// launch is refused (Record) rather than the list cut.
const maxBytes = 1 << 20

// lockWait bounds how long Record waits for another launch's append.
const lockWait = 10 * time.Second

// Read returns the directories the ledger in stateDir lists, the paths of its
// FileName and then the entries of its IdentityFileName; none when neither exists
// (no session has been given one) or stateDir is "". It reads under a shared lock
// on FileName, which Record holds exclusive while it appends. A file of it that is
// not a regular file, is owned by another user (root reads any: its agentbox
// already trusts the HOME it was given), may be written by group or others, is
// larger than maxBytes or holds a line it cannot parse is an *Error.
func Read(stateDir string) ([]Entry, error) {
	if stateDir == "" {
		return nil, nil
	}
	f, err := openToRead(Path(stateDir))
	if err != nil {
		return nil, err
	}
	if f != nil {
		defer f.Close() // and the lock
		// Record appends under its lock on this file: a line being written is read
		// whole or not at all (a write crossing a page is seen a page at a time).
		// A lock held past lockWait (a stuck launch) is read past: a line cut short
		// then refuses as any damaged one does.
		_ = flock.WaitShared(f, lockWait)
	}
	paths, err := parseFile(f, Path(stateDir), false)
	if err != nil {
		return nil, err
	}
	g, err := openToRead(IdentityPath(stateDir))
	if err != nil {
		return nil, err
	}
	if g != nil {
		defer g.Close()
	}
	ids, err := parseFile(g, IdentityPath(stateDir), true)
	if err != nil {
		return nil, err
	}
	return append(paths, ids...), nil
}

// openToRead opens one of the ledger's files to read; nil when it does not exist.
func openToRead(path string) (*os.File, error) {
	f, err := open(path, unix.O_RDONLY)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
		return nil, nil
	}
	return f, err
}

// parseFile parses one of the ledger's files, open at f; none when f is nil.
func parseFile(f *os.File, path string, identities bool) ([]Entry, error) {
	if f == nil {
		return nil, nil
	}
	data, err := io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err != nil {
		return nil, &Error{Path: path, Reason: "cannot be read: " + err.Error()}
	}
	return parse(path, data, identities)
}

// open opens the ledger without following a link or blocking on a FIFO, and
// refuses a file it cannot trust.
func open(path string, flags int) (*os.File, error) {
	fd, err := unix.Open(path, flags|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, &Error{Path: path, Reason: "is a symbolic link; agentbox keeps it as a plain file: remove the link"}
	case err != nil:
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	euid := uint32(os.Geteuid())
	reason := ""
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		reason = "is not a regular file; remove it"
	case st.Uid != euid && euid != 0:
		reason = fmt.Sprintf("is owned by uid %d, not by you (uid %d): that user could remove a directory from it; check it and take it over (chown)", st.Uid, euid)
	case st.Mode&0o022 != 0:
		reason = fmt.Sprintf("may be written by others (mode %04o): they could remove a directory from it; chmod go-w it", st.Mode&0o7777)
	}
	if reason != "" {
		f.Close()
		return nil, &Error{Path: path, Reason: reason}
	}
	return f, nil
}

// parse reads one Go-quoted absolute path a line (a directory name may hold a
// newline, which a plain line would split into two entries), followed by the
// directory's identity (format) on every line of the identities' file, and
// nothing else.
func parse(path string, data []byte, identities bool) ([]Entry, error) {
	if len(data) > maxBytes {
		return nil, &Error{Path: path, Reason: fmt.Sprintf("is larger than %d bytes; remove the directories you have checked from it", maxBytes)}
	}
	var entries []Entry
	for n, line := range bytes.Split(data, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		e, ok := parseLine(string(line))
		if !ok || e.ID.Known() != identities {
			what := "a quoted absolute path"
			if identities {
				what += " with its device, inode and birth time"
			}
			return nil, &Error{Path: path, Reason: fmt.Sprintf("line %d is not %s; repair or remove that line", n+1, what)}
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// format is an identity line, without its newline: the quoted path and the
// identity as three decimal numbers.
func format(e Entry) string {
	return fmt.Sprintf("%s %d %d %d", strconv.Quote(e.Dir), e.ID.Dev, e.ID.Ino, e.ID.Birth)
}

func parseLine(line string) (Entry, bool) {
	q, err := strconv.QuotedPrefix(line)
	if err != nil {
		return Entry{}, false
	}
	dir, err := strconv.Unquote(q)
	if err != nil || !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return Entry{}, false
	}
	e := Entry{Dir: dir}
	rest := line[len(q):]
	if rest == "" {
		return e, true // a line of the paths' file
	}
	fields := strings.Split(rest, " ")
	if len(fields) != 4 || fields[0] != "" {
		return Entry{}, false
	}
	var nums [3]uint64
	for i, f := range fields[1:] {
		if nums[i], err = strconv.ParseUint(f, 10, 64); err != nil {
			return Entry{}, false
		}
	}
	e.ID = Identity{Dev: nums[0], Ino: nums[1], Birth: nums[2]}
	return e, e.ID.Known()
}

// IdentityOf is the identity of the directory (or file) path names now, after
// symlinks; the zero Identity when it cannot be looked at.
func IdentityOf(path string) Identity {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_STATX_SYNC_AS_STAT, unix.STATX_INO|unix.STATX_BTIME, &stx); err != nil {
		return Identity{}
	}
	id := Identity{Dev: unix.Mkdev(stx.Dev_major, stx.Dev_minor), Ino: stx.Ino}
	if stx.Mask&unix.STATX_BTIME != 0 {
		id.Birth = uint64(stx.Btime.Sec)*1_000_000_000 + uint64(stx.Btime.Nsec)
	}
	return id
}

// Record adds to the ledger in stateDir every one of dirs (absolute, clean) that no
// entry covers yet: its path to FileName (once) and its identity (IdentityOf) to
// IdentityFileName, under an exclusive lock on FileName, creating both (and
// stateDir) when missing. An entry covers a directory at or below its path only
// while the entry's directory is still the one recorded (the same identity): after
// a rename, or for a path whose identity was never recorded, the directory gets an
// identity line of its own, so that it is known by its identity whatever its name
// later. It is called before the session's command can run: a launch that cannot
// record its grants does not start.
func Record(stateDir string, dirs []string) error {
	if stateDir == "" || len(dirs) == 0 {
		return nil
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	paths, err := openForAppend(Path(stateDir), false)
	if err != nil {
		return err
	}
	defer paths.f.Close() // and the lock, which covers both files
	if err := flock.Wait(paths.f, lockWait); err != nil {
		return fmt.Errorf("lock %s: %w", paths.f.Name(), err)
	}
	if err := paths.read(); err != nil {
		return err
	}
	ids, err := openForAppend(IdentityPath(stateDir), true)
	if err != nil {
		return err
	}
	defer ids.f.Close()
	if err := ids.read(); err != nil {
		return err
	}
	have := append(paths.entries[:len(paths.entries):len(paths.entries)], ids.entries...)
	listed := make(map[string]bool, len(paths.entries))
	for _, e := range paths.entries {
		listed[e.Dir] = true
	}
	for _, d := range dirs {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("record %s in %s: not an absolute path", strconv.Quote(d), paths.f.Name())
		}
		e := Entry{Dir: filepath.Clean(d)}
		if covered(e.Dir, have) || identitiesOf(e.Dir, have) >= maxIdentities {
			continue
		}
		e.ID = IdentityOf(e.Dir)
		have = append(have, e)
		if !listed[e.Dir] {
			listed[e.Dir] = true
			paths.add(strconv.Quote(e.Dir))
		}
		if e.ID.Known() {
			ids.add(format(e))
		}
	}
	// The identities first: a path whose identity could not be written is still a
	// path listed (the launch fails), never an identity without its path.
	if err := ids.write(); err != nil {
		return err
	}
	return paths.write()
}

// ledgerFile is one of the ledger's files open for Record's append.
type ledgerFile struct {
	f          *os.File
	identities bool
	data       []byte
	entries    []Entry
	added      strings.Builder
}

func openForAppend(path string, identities bool) (*ledgerFile, error) {
	f, err := open(path, unix.O_RDWR|unix.O_CREAT|unix.O_APPEND)
	if err != nil {
		return nil, err
	}
	return &ledgerFile{f: f, identities: identities}, nil
}

func (l *ledgerFile) read() error {
	var err error
	if l.data, err = io.ReadAll(io.LimitReader(l.f, maxBytes+1)); err != nil {
		return &Error{Path: l.f.Name(), Reason: "cannot be read: " + err.Error()}
	}
	l.entries, err = parse(l.f.Name(), l.data, l.identities)
	return err
}

func (l *ledgerFile) add(line string) {
	if l.added.Len() == 0 && len(l.data) > 0 && l.data[len(l.data)-1] != '\n' {
		// The operator's edit left the last line without its newline: appending to
		// it would make it unparsable, and every later lookup refuse.
		l.added.WriteByte('\n')
	}
	l.added.WriteString(line + "\n")
}

func (l *ledgerFile) write() error {
	if l.added.Len() == 0 {
		return nil
	}
	if len(l.data)+l.added.Len() > maxBytes {
		return &Error{Path: l.f.Name(), Reason: fmt.Sprintf("would grow past %d bytes; remove the directories you have checked from it", maxBytes)}
	}
	if _, err := l.f.WriteString(l.added.String()); err != nil {
		return fmt.Errorf("write %s: %w", l.f.Name(), err)
	}
	return nil
}

// maxIdentities bounds the lines one path gets, each with the identity of the
// directory found there when it was given: a script that removes and makes again
// the directory it hands each session (a CI checkout) would otherwise add a line a
// launch until the ledger's bound refuses every launch. Past it the path is still
// listed; a later directory at it is followed by its name only.
const maxIdentities = 8

// identitiesOf counts the entries for dir itself that carry an identity.
func identitiesOf(dir string, entries []Entry) int {
	n := 0
	for _, e := range entries {
		if e.Dir == dir && e.ID.Known() {
			n++
		}
	}
	return n
}

// covered reports whether dir is the path of an entry, or lies below one, that
// still describes what is at its path (looked at once per entry that holds dir):
// the directory it recorded, or nothing that has an identity, as when neither
// exists.
func covered(dir string, entries []Entry) bool {
	for _, e := range entries {
		if !(dir == e.Dir || e.Dir == "/" || strings.HasPrefix(dir, e.Dir+"/")) {
			continue
		}
		if IdentityOf(e.Dir) == e.ID {
			return true
		}
	}
	return false
}
