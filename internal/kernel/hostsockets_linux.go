package kernel

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/termsafe"
)

// maxMaskedSockets bounds how many host sockets one plan masks: each mask is a few
// of the compiled program's ops (program.MaxOps), and a host with more bound where
// the sandbox sees them is refused (TooManySocketsError), never cut short.
const maxMaskedSockets = 256

// procRoot is where the socket tables and their holders are read.
const procRoot = "/proc"

// evalSymlinks resolves a listed socket's path; a variable for the tests, which
// count the resolutions.
var evalSymlinks = filepath.EvalSymlinks

// HostSockets lists the host's path sockets that the sandbox would otherwise
// reach on its read-only view of the host (P4): a daemon's socket outside /tmp and
// /run — LXD's and incus's below /var/snap and /var/lib, a database's below
// /var/lib — is a host process, often root's, that a connect(2) through a read-only
// mount still reaches. The sockets of every network namespace this process can see
// are listed (socketTables), not only its own: a daemon with a network namespace of
// its own binds in the same file system. /tmp and /run are private, HOME is an
// overlay (a socket in its lower layer refuses connections) but for the host
// directories bound over it (Bound); the writable directories are the host's too,
// and a daemon's socket there (a project's own database) is the daemon's, not the
// session's, whose own sockets are bound after the launch; sockets handed in, and
// those below a hidden path, are left alone
// (where the sandbox finds them: a path bound through a symlink is judged by what
// it resolves to). Each is masked by the null device bound read-only over it
// (mounts.Session.MaskSockets). Sockets bound after the launch are not masked.
//
// More than maxMaskedSockets is refused (*TooManySocketsError) after leaving out
// those that only other agentbox sessions' sandboxes hold (sandboxHeld); an
// unreadable socket table of the launcher's own is an error too: a list cut short
// would leave a daemon reachable.
//
// A socket whose file is no longer (only) at its listed name is found, in this
// network namespace, by the file its bind made (movedSockets).
//
// Where a session denies them all by default (DenyPathSockets: the caller sets
// mounts.Session.DenyPathSockets from it) there is nothing to list.
func HostSockets(p SocketScope) ([]string, error) {
	if DenyPathSockets(p.NestedSandbox) {
		return nil, nil
	}
	ents, err := socketTables(procRoot)
	if err != nil {
		return nil, fmt.Errorf("host sockets: %w", err)
	}
	out, err := hostSockets(p, ents, procRoot)
	if err != nil {
		return nil, err
	}
	moved, err := movedSockets(p, procRoot)
	if err != nil {
		return nil, err
	}
	for _, m := range moved {
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	if len(out) > maxMaskedSockets {
		return nil, &TooManySocketsError{Count: len(out), Bound: maxMaskedSockets, Dir: busiestDir(out)}
	}
	return out, nil
}

// SocketScope is what HostSockets needs to know of a session: the host trees the
// sandbox sees as something other than the host's read-only view, where a socket
// needs no mask, and the host directories bound over HOME's overlay.
type SocketScope struct {
	Home string // an overlay inside
	// Bound are host directories bound over HOME (--keep, --keep-agent, the
	// repository, --add-dir's, a linked worktree's Git metadata): the host's own.
	Bound         []string
	KeptPrivate   []string // parts of the kept paths that are a private tmpfs inside
	Handed        []string // the directories bound for sockets handed in (--allow-socket)
	Hidden        []string // --hide's paths
	NestedSandbox bool     // --nested-sandbox (DenyPathSockets)
}

// DenyPathSockets reports whether a session keeps the command off the host's
// path sockets with Landlock's resolve-unix rule (mounts.Session.DenyPathSockets)
// rather than by masking those found at launch (HostSockets): where the kernel can
// (CanDenyPathSockets), unless it asks for nested sandboxes (--nested-sandbox), which
// that rule would keep from mounting. One decision for both, so that a session
// always gets one of the two.
func DenyPathSockets(nested bool) bool {
	return CanDenyPathSockets() && !nested
}

// hostSockets is HostSockets on a given table; proc is where holders are looked up.
func hostSockets(p SocketScope, ents []sockEntry, proc string) ([]string, error) {
	skip := maskSkips(p)
	var out []string
	inodes := map[string][]uint64{} // the table entries behind each mask
	for _, e := range ents {
		path := e.Path
		if !filepath.IsAbs(path) || filepath.Clean(path) != path {
			continue
		}
		// The mask goes at path where no symlink leads to it. A path bound
		// through a symlink (/var/run/docker.sock, a link to a directory) is no
		// mount point: the backends refuse a destination with a symlink in it,
		// and a mask there failed every launch while that socket was bound
		// (anyone's, if connectable). The sandbox reaches it only through the
		// link, which leads to the resolved path: that one is masked (or lies in
		// the private /tmp or /run). One resolution tells both apart: a launch
		// pays it for every path socket of every namespace.
		real, err := evalSymlinks(path)
		c := path
		if err != nil || real != path {
			c = resolvedOf(path, real, err)
		}
		if c == "" || slices.ContainsFunc(skip, func(d string) bool { return hostpath.Within(c, d) }) && !boundSocket(p, c) {
			continue
		}
		if _, ok := inodes[c]; ok {
			inodes[c] = append(inodes[c], e.Inode)
			continue
		}
		// Only what this user can connect to: reached through searchable
		// directories (Lstat) and writable. A socket it cannot reach needs no
		// mask, and a mount below a directory it cannot search would fail.
		if fi, err := os.Lstat(c); err == nil && fi.Mode()&os.ModeSocket != 0 && unix.Access(c, unix.W_OK) == nil {
			out = append(out, c)
			inodes[c] = []uint64{e.Inode}
		}
	}
	if len(out) <= maxMaskedSockets {
		return out, nil
	}
	// Another session's sandbox may bind hundreds in its own directories; those
	// are no host daemon's, and only they may be left out.
	held := sandboxHeld(proc, inodes)
	out = slices.DeleteFunc(out, func(c string) bool {
		return !slices.ContainsFunc(inodes[c], func(ino uint64) bool { return !held[ino] })
	})
	if len(out) > maxMaskedSockets {
		return nil, &TooManySocketsError{Count: len(out), Bound: maxMaskedSockets, Dir: busiestDir(out)}
	}
	return out, nil
}

// maskSkips are the trees whose sockets need no mask: private or pseudo file
// systems, HOME (an overlay; boundSocket takes the host directories bound over it
// back), the sockets handed in and the hidden paths.
func maskSkips(p SocketScope) []string {
	skip := []string{"/tmp", "/run", "/proc", "/dev", "/sys"}
	if p.Home != "" {
		skip = append(skip, p.Home)
	}
	skip = append(skip, p.Handed...)
	// Hidden already (an empty stand-in bound over it, before the masks): a mask
	// below it has no mount point there, which bwrap cannot create.
	return append(skip, p.Hidden...)
}

// boundSocket reports whether c lies in a host directory bound over the HOME
// overlay (SocketScope.Bound), where a host process's socket is reachable, unless
// that part is a private tmpfs inside, a handed-in socket or hidden.
func boundSocket(p SocketScope, c string) bool {
	within := func(d string) bool { return hostpath.Within(c, d) }
	if !slices.ContainsFunc(p.Bound, within) {
		return false
	}
	return !slices.ContainsFunc(p.KeptPrivate, within) &&
		!slices.ContainsFunc(p.Handed, within) && !slices.ContainsFunc(p.Hidden, within)
}

// busiestDir is the directory holding the most of paths, for the refusal.
func busiestDir(paths []string) string {
	n := map[string]int{}
	best := ""
	for _, p := range paths {
		d := filepath.Dir(p)
		n[d]++
		if n[d] > n[best] {
			best = d
		}
	}
	return best
}

// TooManySocketsError: more host sockets are bound where the sandbox sees them
// than a plan masks. Leaving some out would leave their daemons reachable.
type TooManySocketsError struct {
	Count, Bound int
	Dir          string // holds the most of them
}

func (e *TooManySocketsError) Error() string {
	return fmt.Sprintf("host sockets: %d are bound where the sandbox would reach them (most below %s), more than the %d agentbox masks; refused, since the rest would stay reachable: stop what binds them, or hide that directory (--hide)",
		e.Count, termsafe.Quote(e.Dir), e.Bound)
}

// resolvedOf is path with its symlinks resolved, given that resolution c (or its
// failure err); "" when it cannot be, or when it is path itself or lies in the
// private /tmp or /run: a socket bound at /var/run/x is at /run/x, and one bound
// through a link elsewhere is masked where the sandbox would find it.
func resolvedOf(path, c string, err error) string {
	if err != nil || c == path {
		return ""
	}
	for _, d := range []string{"/tmp", "/run"} {
		if hostpath.Within(c, d) {
			return ""
		}
	}
	return c
}
