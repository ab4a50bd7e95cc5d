package kernel

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sockEntry is one line of a network namespace's Unix socket table (/proc/net/unix):
// the socket's inode in sockfs and the address it is bound to, as the binder wrote it.
type sockEntry struct {
	Inode uint64
	Path  string
}

// maxTableBytes bounds one namespace's table; a longer one is an error, not a cut.
const maxTableBytes = 64 << 20

// parseSocketTable reads a /proc/net/unix table and returns its bound entries
// (abstract ones included, "@" first). A line too long for a socket address, or a
// table past limit bytes, is an error: a list cut short would leave the sockets
// after the cut unmasked.
func parseSocketTable(r io.Reader, limit int64) ([]sockEntry, error) {
	lr := &io.LimitedReader{R: r, N: limit + 1}
	sc := bufio.NewScanner(lr)
	sc.Buffer(make([]byte, 0, 4096), 8192)
	var out []sockEntry
	for first := true; sc.Scan(); first = false {
		// Num RefCount Protocol Flags Type St Inode Path
		fields := strings.Fields(sc.Text())
		if first || len(fields) < 8 {
			continue
		}
		ino, err := strconv.ParseUint(fields[6], 10, 64)
		if err != nil {
			// The rest of an address with a newline in it (the kernel prints
			// it raw); its first line named the start of the path.
			continue
		}
		out = append(out, sockEntry{Inode: ino, Path: strings.Join(fields[7:], " ")})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if lr.N <= 0 {
		return nil, fmt.Errorf("longer than %d bytes", limit)
	}
	return out, nil
}

// socketTables reads the Unix socket table of every network namespace this process
// can find: its own, and that of each process listed in /proc (a daemon with
// systemd's PrivateNetwork=, a container sharing a host directory). Namespaces are
// told apart by the inode of their table, which is the namespace's own proc entry:
// unlike /proc/PID/ns/net it can be looked at for every user's processes. The
// launcher's own table must be readable; a process that ends meanwhile is passed
// over. Namespaces held by no process this /proc shows (another PID namespace's,
// hidepid=, one kept alive only by a bind mount or by a socket held elsewhere) are
// not seen; docs/security.md says so.
func socketTables(proc string) ([]sockEntry, error) {
	// Everything is looked up relative to one descriptor of proc, and the PIDs
	// are taken from the directory's raw entries: a launch looks at every process
	// of the host, and the per-process part is what it pays for, so that part
	// allocates nothing (no name, no path, no entry objects; a stat of a path
	// built in a fixed buffer).
	dfd, err := unix.Open(proc, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", proc, err)
	}
	defer unix.Close(dfd)
	t := tableReader{dfd: dfd, seen: map[[2]uint64]bool{}}
	all, _, err := t.read("self/net/unix")
	if err != nil {
		return nil, fmt.Errorf("read %s/self/net/unix: %w", proc, err)
	}
	buf := make([]byte, 8<<10) // what os.File reads a directory with
	var rel [64]byte           // "PID/net/unix" and its NUL
	for {
		n, err := unix.Getdents(dfd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", proc, err)
		}
		if n == 0 {
			return all, nil
		}
		for recs := buf[:n]; len(recs) > 0; {
			name, next, ok := direntName(recs)
			if !ok {
				return nil, fmt.Errorf("list %s: a directory entry the kernel cut short", proc)
			}
			recs = next
			if !allDigits(name) {
				continue
			}
			if len(name)+len("/net/unix\x00") > len(rel) {
				return nil, fmt.Errorf("list %s: a process directory named %q, longer than any PID", proc, name)
			}
			k := copy(rel[:], name)
			k += copy(rel[k:], "/net/unix\x00")
			ents, fresh, err := t.readAt(rel[:k-1])
			switch {
			case err == nil:
				if fresh {
					all = append(all, ents...)
				}
			case errors.Is(err, fs.ErrNotExist), errors.Is(err, unix.ESRCH), errors.Is(err, fs.ErrPermission), errors.Is(err, unix.EINVAL):
				// Gone since the listing, or a process whose proc entries this user
				// may not open: its namespace stays unseen (docs/security.md).
			default:
				return nil, fmt.Errorf("read %s/%s: %w", proc, rel[:k-1], err)
			}
		}
	}
}

// tableReader reads the socket tables below one descriptor of proc, each
// namespace's once, told apart by the device and inode of its table.
type tableReader struct {
	dfd  int
	seen map[[2]uint64]bool
}

// read is readAt for a path given as a string.
func (t *tableReader) read(rel string) ([]sockEntry, bool, error) {
	b := make([]byte, len(rel)+1)
	copy(b, rel)
	return t.readAt(b[:len(rel)])
}

// readAt reads the table at rel (followed in memory by a NUL) when it is a
// namespace not read yet; fresh says it was. A stat first: most processes share a
// namespace already read, and that stat is all they cost.
func (t *tableReader) readAt(rel []byte) (ents []sockEntry, fresh bool, err error) {
	var st unix.Stat_t
	if err := fstatatNul(t.dfd, rel, &st); err != nil {
		return nil, false, err
	}
	if t.seen[[2]uint64{st.Dev, st.Ino}] {
		return nil, false, nil
	}
	name := string(rel)
	fd, err := unix.Openat(t.dfd, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	// The file opened is the one looked at: a PID reused meanwhile could be in
	// another namespace.
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, false, err
	}
	key := [2]uint64{st.Dev, st.Ino}
	if t.seen[key] {
		return nil, false, nil
	}
	t.seen[key] = true
	ents, err = parseSocketTable(f, maxTableBytes)
	return ents, true, err
}

// fstatatNul is fstatat(2) of rel below dfd, following links. Where rel is
// followed in its backing array by a NUL, as the callers here lay it out, the path
// is handed to the kernel as it lies, with no copy made to end it.
func fstatatNul(dfd int, rel []byte, st *unix.Stat_t) error {
	if len(rel) == 0 || cap(rel) == len(rel) || rel[:len(rel)+1][len(rel)] != 0 {
		return unix.Fstatat(dfd, string(rel), st, 0)
	}
	for {
		_, _, e := unix.Syscall6(unix.SYS_NEWFSTATAT, uintptr(dfd), uintptr(unsafe.Pointer(&rel[0])), uintptr(unsafe.Pointer(st)), 0, 0, 0)
		switch e {
		case 0:
			return nil
		case unix.EINTR:
			continue
		}
		return e
	}
}

// direntName takes the first linux_dirent64 record of b apart: its name, and the
// records after it; ok is false for a record that does not fit.
func direntName(b []byte) (name, rest []byte, ok bool) {
	const nameOff = 19 // d_ino 8, d_off 8, d_reclen 2, d_type 1
	if len(b) < nameOff {
		return nil, nil, false
	}
	reclen := int(binary.NativeEndian.Uint16(b[16:]))
	if reclen <= nameOff || reclen > len(b) {
		return nil, nil, false
	}
	name = b[nameOff:reclen]
	if i := bytes.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	}
	return name, b[reclen:], true
}

// allDigits reports whether name is a PID's directory name in proc.
func allDigits(name []byte) bool {
	for _, c := range name {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(name) > 0
}

// sandboxHeld returns, of the socket inodes in want, those that some process holds
// and that every holder this process can look at is a command inside another
// agentbox session's sandbox: it was started with AGENTBOX_SESSION set, which
// agentbox puts in every sandbox, and it is in a user namespace other than this
// process's. Such a socket is another session's, bound where that session may
// write, and no host daemon's. A host daemon's listening socket is held by the
// daemon, which a sandbox can neither be nor hand its socket to, so a hostile
// session cannot get a real host socket left out this way; a holder this process
// may not look at (another user's) leaves the socket counted.
func sandboxHeld(proc string, want map[string][]uint64) map[uint64]bool {
	wanted := map[uint64]bool{}
	for _, inos := range want {
		for _, ino := range inos {
			wanted[ino] = true
		}
	}
	self, _ := os.Readlink(proc + "/self/ns/user")
	held, outside := map[uint64]bool{}, map[uint64]bool{}
	dir, _ := os.ReadDir(proc)
	for _, e := range dir {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		base := proc + "/" + e.Name()
		fds, err := os.ReadDir(base + "/fd")
		if err != nil {
			continue
		}
		sandboxed := -1 // not looked at yet
		for _, fd := range fds {
			l, err := os.Readlink(base + "/fd/" + fd.Name())
			if err != nil || !strings.HasPrefix(l, "socket:[") {
				continue
			}
			ino, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]"), 10, 64)
			if err != nil || !wanted[ino] {
				continue
			}
			if sandboxed < 0 {
				sandboxed = 0
				if inSandbox(base, self) {
					sandboxed = 1
				}
			}
			if sandboxed == 1 {
				held[ino] = true
			} else {
				outside[ino] = true
			}
		}
	}
	for ino := range outside {
		delete(held, ino)
	}
	return held
}

// inSandbox reports whether the process at base (/proc/PID) runs inside an agentbox
// sandbox: AGENTBOX_SESSION in the environment it started with, and a user
// namespace other than self's.
func inSandbox(base, self string) bool {
	ns, err := os.Readlink(base + "/ns/user")
	if err != nil || self == "" || ns == self {
		return false
	}
	env, err := os.ReadFile(base + "/environ")
	if err != nil {
		return false
	}
	for _, kv := range strings.Split(string(env), "\x00") {
		if strings.HasPrefix(kv, "AGENTBOX_SESSION=") {
			return true
		}
	}
	return false
}
