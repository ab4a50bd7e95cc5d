package kernel

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/policy"
)

// maxMaskedSockets bounds how many host sockets one plan masks; a host with more
// bound outside /tmp, /run and HOME than this is unusual enough to name in the docs.
const maxMaskedSockets = 256

// hostSocketsFile lists the Unix sockets bound in the launcher's network namespace
// (the host's), with their paths.
const hostSocketsFile = "/proc/net/unix"

// HostSockets lists the host's path sockets that the sandbox would otherwise
// reach on its read-only view of the host (P4): a daemon's socket outside /tmp and
// /run — LXD's and incus's below /var/snap and /var/lib, a database's below
// /var/lib — is a host process, often root's, that a connect(2) through a read-only
// mount still reaches. /tmp and /run are private, HOME is an overlay (a socket in
// its lower layer refuses connections), and the writable directories are the
// session's own; sockets handed in, and those below a hidden path, are left alone
// (where the sandbox finds them: a path bound through a symlink is judged by what
// it resolves to). Each is masked by the null device bound read-only over it
// (mounts.Session.MaskSockets). Sockets bound after the launch are not masked.
func HostSockets(p *policy.Policy) []string {
	f, err := os.Open(hostSocketsFile)
	if err != nil {
		return nil
	}
	defer f.Close()
	skip := []string{"/tmp", "/run", "/proc", "/dev", "/sys", p.Repo}
	if p.Home != "" {
		skip = append(skip, p.Home)
	}
	skip = append(skip, p.AddDirs...)
	for _, s := range p.Sockets {
		skip = append(skip, s.Bind)
	}
	for _, h := range p.Hide {
		// Hidden already (an empty stand-in bound over it, before the masks): a
		// mask below it has no mount point there, which bwrap cannot create.
		skip = append(skip, h.Path)
	}
	var out []string
	sc := bufio.NewScanner(io.LimitReader(f, 64<<20))
	sc.Buffer(make([]byte, 0, 4096), 8192)
	for first := true; sc.Scan(); first = false {
		// Num RefCount Protocol Flags Type St Inode Path
		fields := strings.Fields(sc.Text())
		if first || len(fields) < 8 {
			continue
		}
		path := strings.Join(fields[7:], " ")
		if !filepath.IsAbs(path) || filepath.Clean(path) != path || slices.Contains(out, path) {
			continue
		}
		cands := []string{resolved(path)}
		if real, err := filepath.EvalSymlinks(path); err == nil && real == path {
			// A path bound through a symlink (/var/run/docker.sock, a link to a
			// directory) is no mount point: the backends refuse a destination with
			// a symlink in it, and a mask there failed every launch while that
			// socket was bound (anyone's, if connectable). The sandbox reaches it
			// only through the link, which leads to the resolved path: that one
			// is masked (or lies in the private /tmp or /run).
			cands = []string{path}
		}
		for _, c := range cands {
			if c == "" || slices.ContainsFunc(skip, func(d string) bool { return policy.Within(c, d) }) {
				continue
			}
			// Only what this user can connect to: reached through searchable
			// directories (Lstat) and writable. A socket it cannot reach needs no
			// mask, and a mount below a directory it cannot search would fail.
			if fi, err := os.Lstat(c); err == nil && fi.Mode()&os.ModeSocket != 0 && !slices.Contains(out, c) && unix.Access(c, unix.W_OK) == nil {
				out = append(out, c)
			}
		}
		if len(out) >= maxMaskedSockets {
			break
		}
	}
	return out
}

// resolved is path with its symlinks resolved ("" when it cannot be): a socket
// bound at /var/run/x is at /run/x, and one bound through a link elsewhere is
// masked where the sandbox would find it.
func resolved(path string) string {
	c, err := filepath.EvalSymlinks(path)
	if err != nil || c == path {
		return ""
	}
	for _, d := range []string{"/tmp", "/run"} {
		if policy.Within(c, d) {
			return ""
		}
	}
	return c
}
