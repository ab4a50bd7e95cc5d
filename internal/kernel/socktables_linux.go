package kernel

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

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
	// are read as names alone (no sorting, no entry objects): a launch looks at
	// every process of the host, and the per-process part is what it pays for.
	dfd, err := unix.Open(proc, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", proc, err)
	}
	dir := os.NewFile(uintptr(dfd), proc)
	defer dir.Close()
	seen := map[[2]uint64]bool{}
	read := func(rel string) ([]sockEntry, bool, error) {
		// A stat first: most processes share a namespace already read.
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, rel, &st, 0); err != nil {
			return nil, false, err
		}
		key := [2]uint64{st.Dev, st.Ino}
		if seen[key] {
			return nil, false, nil
		}
		fd, err := unix.Openat(dfd, rel, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, false, err
		}
		f := os.NewFile(uintptr(fd), rel)
		defer f.Close()
		// The file opened is the one looked at: a PID reused meanwhile could
		// be in another namespace.
		if err := unix.Fstat(fd, &st); err != nil {
			return nil, false, err
		}
		key = [2]uint64{st.Dev, st.Ino}
		if seen[key] {
			return nil, false, nil
		}
		seen[key] = true
		ents, err := parseSocketTable(f, maxTableBytes)
		return ents, true, err
	}
	all, _, err := read("self/net/unix")
	if err != nil {
		return nil, fmt.Errorf("read %s/self/net/unix: %w", proc, err)
	}
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", proc, err)
	}
	rel := make([]byte, 0, 32)
	for _, name := range names {
		if !allDigits(name) {
			continue
		}
		rel = append(append(rel[:0], name...), "/net/unix"...)
		ents, fresh, err := read(string(rel))
		switch {
		case err == nil:
			if fresh {
				all = append(all, ents...)
			}
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, unix.ESRCH), errors.Is(err, fs.ErrPermission), errors.Is(err, unix.EINVAL):
			// Gone since the listing, or a process whose proc entries this user
			// may not open: its namespace stays unseen (docs/security.md).
		default:
			return nil, fmt.Errorf("read %s/%s: %w", proc, rel, err)
		}
	}
	return all, nil
}

// allDigits reports whether name is a PID's directory name in proc.
func allDigits(name string) bool {
	for i := 0; i < len(name); i++ {
		if name[i] < '0' || name[i] > '9' {
			return false
		}
	}
	return name != ""
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
