// Package leafcg gives a session a cgroup of its own below the launcher's, so that
// nothing inside reaches the rest of the user's cgroup tree.
//
// The sandbox has its own cgroup namespace, but a command inside can make a nested
// user + mount + cgroup namespace and mount cgroup2: the root of that view is the
// cgroup the command is in. Were that the launcher's own (systemd delegates one to
// each user service and app scope, and root owns every cgroup it is in), the command
// could create cgroups, set limits, freeze or kill the launcher, its terminal and
// every other process of that scope. So the launcher makes a leaf below its cgroup
// and starts the sandbox's PID 1 in it (File: clone3's CLONE_INTO_CGROUP), or moves
// it there before it has its plan; every process of the session is born there, the
// sandbox's own cgroup namespace is rooted there, and a nested view reaches only the
// session. After the
// session the launcher moves what is left (the init, which may linger) back and
// removes the leaf's tree.
//
// When no leaf can be made, nothing of the launcher's cgroup may be writable to the
// sandbox (same uid and groups, no capability: the file mode decides, whatever the
// host's mount says), or the launch is refused.
//
// With limits (--memory, --pids, --cpus; limits_linux.go) the session's cgroup is
// made instead below the nearest cgroup, from the launcher's up, that is delegated
// to the caller (delegation_linux.go) and gives its children the controllers; the
// limits are written into it and read back, and the sandbox lives in a leaf below
// it. A host where that cgroup does not exist refuses the launch.
package leafcg

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
)

// Leaf is one session's cgroup.
type Leaf struct {
	Dir    string // the leaf the sandbox is placed in
	Parent string // the launcher's cgroup
	// Top is the session's cgroup removed at the end: Dir, or with Limits the
	// limited cgroup above it (limits_linux.go).
	Top    string
	Limits Limits
	placed int      // the sandbox's PID 1, moved in by Place
	file   *os.File // Dir, open: what the sandbox's first process is cloned into
}

// maxWalk bounds the cgroups Remove walks below the leaf.
const maxWalk = 4096

// RefusedError says why a launch is refused: a cgroup the sandbox could write and
// no leaf to keep it out.
type RefusedError struct {
	Path   string // the writable cgroup file or directory
	Reason string // why no leaf could be made
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("refused: %s is writable to you, and no session cgroup could be made below it (%s): a nested cgroup namespace inside the sandbox could change your cgroups; let agentbox create one there (check cgroup.max.descendants and cgroup.max.depth), or run it from a cgroup you cannot write", e.Path, e.Reason)
}

// Prepare makes a leaf named name below the calling process's cgroup2 cgroup. nil
// and no error: there is no cgroup2 hierarchy, or no leaf could be made and nothing
// of the process's cgroup is writable to it. With limits set, the session's cgroup
// is made where the limits can be enforced (limits_linux.go), or the launch is
// refused with a *LimitError.
func Prepare(name string, lim Limits) (*Leaf, error) {
	h, err := Probe()
	if err != nil {
		return nil, err
	}
	return h.Prepare(name, lim)
}

// Prepare is the package's Prepare where the caller has probed h already.
func (h Host) Prepare(name string, lim Limits) (*Leaf, error) {
	if lim.Set() {
		return h.prepareLimited(name, lim)
	}
	parent := h.Own
	if parent == "" {
		return nil, nil
	}
	removeLeftovers(parent)
	dir := filepath.Join(parent, name)
	mkErr := os.Mkdir(dir, 0o755)
	if mkErr == nil {
		l := &Leaf{Dir: dir, Top: dir, Parent: parent}
		if err := l.open(); err != nil {
			_ = l.Remove()
			return nil, err
		}
		return l, nil
	}
	if w := firstWritable(parent); w != "" {
		return nil, &RefusedError{Path: w, Reason: "mkdir: " + errText(mkErr)}
	}
	return nil, nil
}

func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// ownCgroupAndMount is ownCgroup and the mount point of the cgroup2 hierarchy it is
// found in.
func ownCgroupAndMount() (string, string, error) {
	// Both files are read into one buffer on the stack where they fit (a launch
	// reads them on its critical path): os.ReadFile starts at 512 bytes for a /proc
	// file, whose size stat gives as 0, and grows, each read another pass of the
	// kernel over the table.
	var stackBuf [8 << 10]byte
	b, err := readProc("/proc/self/cgroup", stackBuf[:])
	if err != nil {
		return "", "", fmt.Errorf("own cgroup: %w", err)
	}
	var rel string
	found := false
	for _, line := range strings.Split(string(b), "\n") {
		if r, ok := strings.CutPrefix(line, "0::"); ok {
			rel, found = r, true
		}
	}
	if !found {
		return "", "", nil
	}
	table, err := readProc("/proc/self/mountinfo", stackBuf[:])
	if err != nil {
		return "", "", fmt.Errorf("own cgroup: %w", err)
	}
	for _, m := range cgroup2Mounts(table) {
		// A mount of the hierarchy's part at m.root shows rel below it.
		if r, ok := strings.CutPrefix(rel, strings.TrimSuffix(m.root, "/")); ok && (r == "" || r[0] == '/') {
			return filepath.Join(m.point, r), m.point, nil
		}
	}
	return "", "", nil
}

// readProc reads the /proc file at path whole, into buf where it fits, else into a
// larger buffer of its own.
func readProc(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	for err == unix.EINTR {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	n := 0
	for {
		if n == len(buf) {
			buf = append(buf, make([]byte, max(len(buf), 4<<10))...)
		}
		k, err := unix.Read(fd, buf[n:])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		case k == 0:
			return buf[:n], nil
		}
		n += k
	}
}

// mount is a cgroup2 mount: the part of the hierarchy it shows, and where.
type mount struct{ root, point string }

// cgroup2Mounts lists a mountinfo table's cgroup2 mounts in its order. Only their
// lines are taken apart: every launch reads this table, and the rest of it is of no
// interest here (proc(5): "ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] -
// FSTYPE SOURCE SUPER", ROOT and POINT with space, tab, newline and backslash
// written in octal).
func cgroup2Mounts(table []byte) []mount {
	var out []mount
	for _, line := range strings.Split(string(table), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		f := strings.Fields(pre)
		if len(f) < 5 {
			continue
		}
		out = append(out, mount{root: unescapeOctal(f[3]), point: unescapeOctal(f[4])})
	}
	return out
}

// unescapeOctal undoes mountinfo's \NNN escapes.
func unescapeOctal(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// firstWritable returns the first of dir and its control files that the sandbox
// could write (by file mode alone, as it holds no capability), "" when none. The
// cgroups below dir are not looked at: on a systemd host the launcher's cgroup is a
// leaf (a scope or service); elsewhere a subtree delegated below a cgroup the user
// cannot write stays reachable (docs/security.md).
func firstWritable(dir string) string {
	uid, groups := os.Getuid(), ownGroups()
	ents, err := os.ReadDir(dir)
	if err != nil {
		return dir // cannot show it is closed
	}
	paths := []string{dir}
	for _, e := range ents {
		if !e.IsDir() {
			paths = append(paths, filepath.Join(dir, e.Name()))
		}
	}
	for _, p := range paths {
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil && writable(st, uid, groups) {
			return p
		}
	}
	return ""
}

func writable(st unix.Stat_t, uid int, groups []int) bool {
	switch {
	case int(st.Uid) == uid:
		return st.Mode&0o200 != 0
	case slices.Contains(groups, int(st.Gid)):
		return st.Mode&0o020 != 0
	}
	return st.Mode&0o002 != 0
}

func ownGroups() []int {
	g, _ := os.Getgroups()
	return append(g, os.Getgid())
}

// open opens the leaf's directory for File, without following a symlink.
func (l *Leaf) open() error {
	fd, err := safepath.Open(l.Dir, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return fmt.Errorf("session cgroup: open %s: %w", l.Dir, err)
	}
	l.file = os.NewFile(uintptr(fd), l.Dir)
	return nil
}

// File is the leaf's directory, open, for the start of the sandbox's first
// process in it (clone3's CLONE_INTO_CGROUP, backend.Options.Cgroup): born there,
// the sandbox's cgroup namespace is rooted at the leaf. It stays open until Remove.
func (l *Leaf) File() *os.File { return l.file }

// Place moves process pid, the sandbox's PID 1, into the leaf.
func (l *Leaf) Place(pid int) error {
	if err := writePid(l.Dir, pid); err != nil {
		return fmt.Errorf("move the sandbox into its cgroup %s: %w", l.Dir, err)
	}
	l.placed = pid
	return nil
}

func writePid(dir string, pid int) error {
	return os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
}

// Remove moves the init back to the parent, if it is still in the leaf's tree (the
// raw init lingers until the launcher exits; its session is over), kills anything
// else there (nothing should be: the session's PID namespace is gone), and removes
// the tree, deepest first. It gives up after a second with the cgroups it could not
// remove named.
func (l *Leaf) Remove() error {
	if l.file != nil {
		l.file.Close()
		l.file = nil
	}
	deadline := time.Now().Add(time.Second)
	for {
		dirs := l.tree()
		for _, d := range dirs {
			if l.placed != 0 && slices.Contains(pids(d), l.placed) {
				_ = writePid(l.Parent, l.placed) // gone meanwhile: nothing to move
			}
		}
		if os.WriteFile(filepath.Join(l.Top, "cgroup.kill"), []byte("1"), 0) != nil {
			// No cgroup.kill (before Linux 5.14): each process found there. One
			// forking meanwhile is found on the next round.
			for _, d := range dirs {
				for _, pid := range pids(d) {
					if pid != l.placed {
						_ = unix.Kill(pid, unix.SIGKILL)
					}
				}
			}
		}

		var left []string
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := unix.Rmdir(dirs[i]); err != nil && err != unix.ENOENT {
				left = append(left, dirs[i])
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("session cgroups left behind: %s", strings.Join(left, " "))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// tree lists the session's cgroup and every cgroup below it, parents first, at
// most maxWalk.
func (l *Leaf) tree() []string {
	var dirs []string
	_ = filepath.WalkDir(l.Top, func(p string, d fs.DirEntry, err error) error {
		if err != nil || len(dirs) >= maxWalk {
			return filepath.SkipDir
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	return dirs
}

func pids(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if n, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil {
			out = append(out, n)
		}
	}
	return out
}
