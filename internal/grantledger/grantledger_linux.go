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

// Read returns the directories the ledger in stateDir lists; none when it does not
// exist (no session has been given one) or stateDir is "". A ledger that is not a
// regular file, is owned by another user (root reads any: its agentbox already
// trusts the HOME it was given), may be written by group or others, is larger than
// maxBytes or holds a line it cannot parse is an *Error.
func Read(stateDir string) ([]string, error) {
	if stateDir == "" {
		return nil, nil
	}
	path := Path(stateDir)
	f, err := open(path, unix.O_RDONLY)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err != nil {
		return nil, &Error{Path: path, Reason: "cannot be read: " + err.Error()}
	}
	return parse(path, data)
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

// parse reads one Go-quoted absolute path a line: a directory name may hold a
// newline, which a plain line would split into two entries.
func parse(path string, data []byte) ([]string, error) {
	if len(data) > maxBytes {
		return nil, &Error{Path: path, Reason: fmt.Sprintf("is larger than %d bytes; remove the directories you have checked from it", maxBytes)}
	}
	var dirs []string
	for n, line := range bytes.Split(data, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		dir, err := strconv.Unquote(string(line))
		if err != nil || !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
			return nil, &Error{Path: path, Reason: fmt.Sprintf("line %d is not a quoted absolute path; repair or remove that line", n+1)}
		}
		dirs = append(dirs, dir)
	}
	return dirs, nil
}

// Record adds to the ledger in stateDir every one of dirs (absolute, clean) that no
// entry covers yet, under an exclusive lock on the ledger, creating it (and
// stateDir) when missing. It is called before the session's command can run: a
// launch that cannot record its grants does not start.
func Record(stateDir string, dirs []string) error {
	if stateDir == "" || len(dirs) == 0 {
		return nil
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	path := Path(stateDir)
	f, err := open(path, unix.O_RDWR|unix.O_CREAT|unix.O_APPEND)
	if err != nil {
		return err
	}
	defer f.Close() // and the lock
	if err := flock.Wait(f, lockWait); err != nil {
		return fmt.Errorf("lock %s: %w", path, err)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err != nil {
		return &Error{Path: path, Reason: "cannot be read: " + err.Error()}
	}
	have, err := parse(path, data)
	if err != nil {
		return err
	}
	var add strings.Builder
	if len(data) > 0 && data[len(data)-1] != '\n' {
		// The operator's edit left the last line without its newline: appending to
		// it would make it unparsable, and every later lookup refuse.
		add.WriteByte('\n')
	}
	for _, d := range dirs {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("record %s in %s: not an absolute path", strconv.Quote(d), path)
		}
		d = filepath.Clean(d)
		if covered(d, have) {
			continue
		}
		have = append(have, d)
		add.WriteString(strconv.Quote(d) + "\n")
	}
	if strings.Trim(add.String(), "\n") == "" {
		return nil
	}
	if len(data)+add.Len() > maxBytes {
		return &Error{Path: path, Reason: fmt.Sprintf("would grow past %d bytes; remove the directories you have checked from it", maxBytes)}
	}
	if _, err := f.WriteString(add.String()); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// covered reports whether dir is one of dirs or lies below one.
func covered(dir string, dirs []string) bool {
	for _, d := range dirs {
		if dir == d || d == "/" || strings.HasPrefix(dir, d+"/") {
			return true
		}
	}
	return false
}
