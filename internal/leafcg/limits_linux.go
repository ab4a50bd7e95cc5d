package leafcg

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
)

// Limits are what the session's cgroup bounds (policy.Limits); zero: no limit of
// that kind.
type Limits struct {
	Memory    int64 // memory.max, bytes; memory.swap.max is 0
	Pids      int64 // pids.max
	MilliCPUs int64 // cpu.max, thousandths of a CPU per period
}

// Set says whether any limit is set.
func (l Limits) Set() bool { return l.Memory > 0 || l.Pids > 0 || l.MilliCPUs > 0 }

// maxDescendants and maxDepth bound the cgroups below a limited session's cgroup
// (its sandbox leaf and what a nested cgroup namespace makes): fewer than Remove
// walks (maxWalk).
const (
	maxDescendants = 1024
	maxDepth       = 16
)

// cpuPeriod is cpu.max's period in microseconds (the kernel's default).
const cpuPeriod = 100000

// sandboxLeaf is the cgroup below the limited one that the sandbox's processes live
// in: the limits sit one level above the root of any cgroup namespace the command
// makes, out of its reach even where cgroup2 is mounted without nsdelegate.
const sandboxLeaf = "sandbox"

// controllers are the cgroup controllers lim needs, in the kernel's names.
func (l Limits) controllers() []string {
	var c []string
	if l.Memory > 0 {
		c = append(c, "memory")
	}
	if l.Pids > 0 {
		c = append(c, "pids")
	}
	if l.MilliCPUs > 0 {
		c = append(c, "cpu")
	}
	return c
}

// LimitError says why the host cannot enforce a limit, and what to do.
type LimitError struct {
	Flag   string // --memory, --pids or --cpus
	Reason string
	Fix    string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s: refused: this host cannot enforce it: %s; %s", e.Flag, e.Reason, e.Fix)
}

func flagOf(controller string) string {
	switch controller {
	case "memory":
		return "--memory"
	case "pids":
		return "--pids"
	}
	return "--cpus"
}

// fixDelegate is the usual way to a delegated cgroup on a systemd host.
const fixDelegate = "start agentbox in a cgroup delegated to you, e.g. systemd-run --user --scope -p Delegate=yes agentbox exec …, or leave the flag out"

// Check says whether lim can be enforced here: nil, or the *LimitError a launch
// would be refused with. It changes nothing.
func Check(lim Limits) error {
	if !lim.Set() {
		return nil
	}
	h, err := Probe()
	if err != nil {
		return err
	}
	return h.Check(lim)
}

// Check is the package's Check where the caller has probed h already.
func (h Host) Check(lim Limits) error {
	if !lim.Set() {
		return nil
	}
	_, err := limitParent(h, os.Getuid(), lim.controllers())
	return err
}

// prepareLimited makes the session's limited cgroup name below the cgroup
// limitParent finds, writes lim into it, and makes the sandbox's leaf below it.
func (h Host) prepareLimited(name string, lim Limits) (*Leaf, error) {
	want := lim.controllers()
	parent, err := limitParent(h, os.Getuid(), want)
	if err != nil {
		return nil, err
	}
	removeLeftovers(parent.dir)
	pfd, err := openCgroupDir(parent.dir)
	if err != nil {
		return nil, fmt.Errorf("session cgroup: %w", err)
	}
	defer unix.Close(pfd)
	if len(parent.enable) > 0 {
		if err := writeAt(pfd, "cgroup.subtree_control", "+"+strings.Join(parent.enable, " +")); err != nil {
			return nil, &LimitError{Flag: flagOf(parent.enable[0]), Reason: fmt.Sprintf("enabling %s for the children of %s: %v", strings.Join(parent.enable, ", "), parent.dir, err), Fix: fixDelegate}
		}
	}
	if err := unix.Mkdirat(pfd, name, 0o755); err != nil {
		return nil, fmt.Errorf("session cgroup: mkdir %s: %w", filepath.Join(parent.dir, name), err)
	}
	top := filepath.Join(parent.dir, name)
	l := &Leaf{Dir: filepath.Join(top, sandboxLeaf), Top: top, Parent: h.Own, Limits: lim}
	if err := l.writeLimits(pfd, name); err != nil {
		_ = l.Remove()
		return nil, err
	}
	return l, nil
}

// writeLimits writes lim into the limited cgroup (name below pfd) and makes the
// sandbox's leaf below it.
func (l *Leaf) writeLimits(pfd int, name string) error {
	tfd, err := safepath.OpenBeneath(pfd, name, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return fmt.Errorf("session cgroup %s: %w", l.Top, err)
	}
	defer unix.Close(tfd)
	lim := l.Limits
	var files [][2]string
	if lim.Memory > 0 {
		// No swap: over its limit the session is stopped, not left thrashing
		// the host's swap; and the OOM kill takes the whole session, not one
		// process of it at random.
		files = append(files, [2]string{"memory.max", strconv.FormatInt(lim.Memory, 10)},
			[2]string{"memory.swap.max", "0"}, [2]string{"memory.oom.group", "1"})
	}
	if lim.Pids > 0 {
		files = append(files, [2]string{"pids.max", strconv.FormatInt(lim.Pids, 10)})
	}
	if lim.MilliCPUs > 0 {
		files = append(files, [2]string{"cpu.max", fmt.Sprintf("%d %d", lim.MilliCPUs*cpuPeriod/1000, cpuPeriod)})
	}
	// The sandbox cannot write its cgroup's files (/sys is read-only), but a command
	// in a nested user and cgroup namespace may mount cgroup2 at its own root and
	// make cgroups below it: bounded, so that Remove's walk reaches every one of
	// them and the user's tree keeps nothing of the session.
	files = append(files, [2]string{"cgroup.max.descendants", strconv.Itoa(maxDescendants)},
		[2]string{"cgroup.max.depth", strconv.Itoa(maxDepth)})
	for _, f := range files {
		err := writeAt(tfd, f[0], f[1])
		if errors.Is(err, unix.ENOENT) && f[0] == "memory.swap.max" {
			continue // no swap accounting in this kernel: no swap is charged either
		}
		if err != nil {
			return fmt.Errorf("session cgroup: write %s to %s: %w", f[1], filepath.Join(l.Top, f[0]), err)
		}
	}
	// The controllers are enabled below the session's cgroup too: the kernel then
	// refuses to disable them above it while the session runs, so no other process
	// can take a limit away from under it.
	want := lim.controllers()
	if err := writeAt(tfd, "cgroup.subtree_control", "+"+strings.Join(want, " +")); err != nil {
		return fmt.Errorf("session cgroup: enable %s below %s: %w", strings.Join(want, ", "), l.Top, err)
	}
	if err := l.verify(tfd, files, want); err != nil {
		return err
	}
	if err := unix.Mkdirat(tfd, sandboxLeaf, 0o755); err != nil {
		return fmt.Errorf("session cgroup: mkdir %s: %w", l.Dir, err)
	}
	return l.open()
}

// verify reads back what writeLimits wrote: a limit counts once the kernel shows it
// in force, not when the write returned.
func (l *Leaf) verify(tfd int, files [][2]string, want []string) error {
	for _, list := range []string{"cgroup.controllers", "cgroup.subtree_control"} {
		have := fields(readAt(tfd, list))
		for _, c := range want {
			if !contains(have, c) {
				return &LimitError{Flag: flagOf(c), Reason: fmt.Sprintf("the %s controller is not in %s after the session's cgroup was made (disabled above it meanwhile?)", c, filepath.Join(l.Top, list)), Fix: fixDelegate}
			}
		}
	}
	for _, f := range files {
		got, err := readAtErr(tfd, f[0])
		if errors.Is(err, unix.ENOENT) && f[0] == "memory.swap.max" {
			continue
		}
		got = strings.TrimSpace(got)
		ok := got == f[1]
		if f[0] == "memory.max" {
			// The kernel keeps whole pages: the limit reads back rounded down.
			n, perr := strconv.ParseInt(got, 10, 64)
			ok = perr == nil && n > 0 && n <= l.Limits.Memory
		}
		if err != nil || !ok {
			return fmt.Errorf("session cgroup: %s reads %q after %q was written (%v): the limit is not in force", filepath.Join(l.Top, f[0]), got, f[1], err)
		}
	}
	return nil
}

// openCgroupDir opens dir, an absolute path, as an O_PATH descriptor without
// following a symlink, and checks that it is on a cgroup2 filesystem.
func openCgroupDir(dir string) (int, error) {
	fd, err := safepath.Open(dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", dir, err)
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		unix.Close(fd)
		return -1, fmt.Errorf("open %s: not a cgroup2 directory", dir)
	}
	return fd, nil
}

// writeAt writes value to the control file name below the directory dirfd.
func writeAt(dirfd int, name, value string) error {
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	_, err = unix.Write(fd, []byte(value))
	return err
}

// readAt is the control file name below the directory dirfd, "" when unreadable.
func readAt(dirfd int, name string) string {
	s, _ := readAtErr(dirfd, name)
	return s
}

func readAtErr(dirfd int, name string) (string, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	return string(b), err
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func fields(s string) []string { return strings.Fields(s) }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// keyed reads a flat-keyed control file ("key value" lines: memory.events,
// cpu.stat); -1 for a key it does not hold.
func keyed(text, key string) int64 {
	sc := bufio.NewScanner(bytes.NewReader([]byte(text)))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}
