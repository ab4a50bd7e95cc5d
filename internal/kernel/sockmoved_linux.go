package kernel

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/termsafe"
)

// movedSockets returns the names to mask, beyond the listed ones, of this network
// namespace's path sockets whose file is not (only) where the socket table says: a
// daemon that binds a temporary name and renames it into place, or links a second
// name, is listed at the name bind was given. sock_diag says which file each bind
// made; the other names of that file are looked for in the listed name's directory.
// A file with a name there and another elsewhere refuses the launch
// (*MovedSocketError), unless only other sessions' sandboxes hold it; one with no
// name there is passed over, since an unlinked socket (common) and one whose
// directory moved look the same; one on a file system mounted nowhere this user can search
// (another mount namespace's own, a container's root below a root-only directory)
// is on no path the sandbox sees. Without sock_diag for Unix
// sockets (a kernel built without it) only the listed names are masked.
func movedSockets(p SocketScope, proc string) ([]string, error) {
	files, err := boundFiles()
	if err != nil {
		return nil, nil
	}
	// The mount table is read only for a socket not where the table says: in the
	// common case every one is, and the launch need not read it at all.
	var devs map[uint64][]string
	skip := maskSkips(p)
	skipped := func(c string) bool {
		return slices.ContainsFunc(skip, func(d string) bool { return hostpath.Within(c, d) }) && !boundSocket(p, c)
	}
	var out []string
	lost := map[string][]uint64{}
	for _, f := range files {
		if !filepath.IsAbs(f.Name) || filepath.Clean(f.Name) != f.Name || skipped(f.Name) {
			continue
		}
		var st unix.Stat_t
		if unix.Lstat(f.Name, &st) == nil && sameFile(&st, f) && st.Nlink == 1 {
			continue // where the table says: HostSockets masks it there
		}
		if devs == nil {
			if devs, err = mountedDevs(proc); err != nil {
				return nil, fmt.Errorf("host sockets: %w", err)
			}
		}
		if !slices.ContainsFunc(devs[f.Dev], func(mp string) bool { return unix.Access(mp, unix.X_OK) == nil }) {
			continue // mounted nowhere this user can search: no path the sandbox sees
		}
		dir, err := filepath.EvalSymlinks(filepath.Dir(f.Name))
		if err == nil && skipped(filepath.Join(dir, filepath.Base(f.Name))) {
			continue
		}
		names, nlink := namesOf(dir, f)
		if len(names) == 0 {
			// Unlinked, most often (a daemon's socket removed while it runs), or
			// moved with its directory: nothing tells the two apart.
			continue
		}
		if uint64(len(names)) != nlink {
			// The name elsewhere is the same file: connectable only where this
			// one is writable.
			if unix.Access(names[0], unix.W_OK) == nil {
				lost[f.Name] = append(lost[f.Name], f.Inode)
			}
			continue
		}
		for _, n := range names {
			if !skipped(n) && unix.Access(n, unix.W_OK) == nil {
				out = append(out, n)
			}
		}
	}
	if len(lost) > 0 {
		held := sandboxHeld(proc, lost)
		for name, inos := range lost {
			if slices.ContainsFunc(inos, func(i uint64) bool { return !held[i] }) {
				return nil, &MovedSocketError{Name: name}
			}
		}
	}
	return out, nil
}

func sameFile(st *unix.Stat_t, f boundFile) bool {
	return st.Dev == f.Dev && uint32(st.Ino) == f.Ino
}

// namesOf returns the sockets in dir that are f's file, and that file's link count.
func namesOf(dir string, f boundFile) ([]string, uint64) {
	if dir == "" {
		return nil, 0
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0
	}
	var names []string
	var nlink uint64
	for _, e := range ents {
		if e.Type() != os.ModeSocket {
			continue
		}
		n := filepath.Join(dir, e.Name())
		var st unix.Stat_t
		if unix.Lstat(n, &st) == nil && sameFile(&st, f) {
			names = append(names, n)
			nlink = uint64(st.Nlink)
		}
	}
	return names, nlink
}

// mountedDevs maps each device mounted in this process's mount namespace to its
// mount points.
func mountedDevs(proc string) (map[uint64][]string, error) {
	devs := map[uint64][]string{}
	err := eachMount(proc, func(fields []string) error {
		maj, mnr, ok := strings.Cut(fields[2], ":")
		a, err1 := strconv.ParseUint(maj, 10, 32)
		b, err2 := strconv.ParseUint(mnr, 10, 32)
		if !ok || err1 != nil || err2 != nil {
			return fmt.Errorf("%s/self/mountinfo: bad device %q", proc, fields[2])
		}
		d := unix.Mkdev(uint32(a), uint32(b))
		devs[d] = append(devs[d], unescapeMount(fields[4]))
		return nil
	})
	if err != nil {
		return nil, err
	}
	return devs, nil
}

// eachMount calls fn with the fields of each line of this process's mountinfo
// that has at least the mount point (field 5).
func eachMount(proc string, fn func(fields []string) error) error {
	f, err := os.Open(proc + "/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		if err := fn(fields); err != nil {
			return err
		}
	}
	return sc.Err()
}

// mountsBelow lists the mount points strictly below dir in this process's mount
// namespace.
func mountsBelow(proc, dir string) []string {
	var below []string
	prefix := strings.TrimSuffix(dir, "/") + "/"
	if prefix == "/" {
		return nil
	}
	_ = eachMount(proc, func(fields []string) error {
		if mp := unescapeMount(fields[4]); strings.HasPrefix(mp, prefix) {
			below = append(below, mp)
		}
		return nil
	})
	return below
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// MovedSocketError: a host path socket's file has a name outside the directory the
// socket table names, which agentbox cannot find to mask.
type MovedSocketError struct{ Name string }

func (e *MovedSocketError) Error() string {
	return fmt.Sprintf("host sockets: the socket bound at %s has another name outside its directory (a hard link made since), which agentbox cannot find to mask; refused, since it would stay reachable: remove the link, restart what bound it, or hide the directory it is in (--hide)",
		termsafe.Quote(e.Name))
}
