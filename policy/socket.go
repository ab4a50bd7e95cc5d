package policy

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/internal/hostpath"
)

// Socket is one host Unix socket handed into the sandbox at its own path
// (--allow-socket). Bind is what the plan binds read-only: the socket itself, or,
// below /tmp and /run (which the sandbox has its own of, so there is no mount point
// to bind a file onto), the directory of its own that holds it. Connecting to a
// socket needs no write access to its mount.
type Socket struct {
	Path string // canonical path of the socket
	Bind string // Path, or its directory
	// From is what hands the socket in when it is not --allow-socket (the
	// session's own, e.g. --ssh-agent's filter), for the plan's comment.
	From string
}

// resolveSockets validates --allow-socket: an absolute path, no symlink in it, a
// socket; below /tmp or /run its directory must hold nothing else and be none of
// the shared ones, since all of it is handed in.
func resolveSockets(p *Policy, opts Options) error {
	for _, arg := range opts.AllowSocket {
		refuse := func(why string) error { return &Error{What: "--allow-socket", Path: arg, Reason: why} }
		if !filepath.IsAbs(arg) || strings.ContainsRune(arg, 0) {
			return refuse("is not an absolute path")
		}
		path := filepath.Clean(arg)
		canon, err := filepath.EvalSymlinks(path)
		if err != nil {
			return refuse(reason(err))
		}
		if canon != path {
			return refuse("has a symlink in its path (it leads to " + quote(canon) + "); give that path")
		}
		fi, err := os.Lstat(path)
		if err != nil {
			return refuse(reason(err))
		}
		if fi.Mode()&os.ModeSocket == 0 {
			return refuse("is not a Unix socket")
		}
		for _, d := range pseudo {
			if hostpath.Within(path, d) {
				return refuse("lies in " + d)
			}
		}
		s := Socket{Path: path, Bind: path}
		if hostpath.Within(path, "/tmp") || hostpath.Within(path, "/run") {
			dir := filepath.Dir(path)
			if dir == "/tmp" || dir == "/run" || dir == "/run/user" || filepath.Dir(dir) == "/run/user" {
				return refuse("lies in " + dir + ", which is shared; only a socket in a directory of its own (like ssh-agent's /tmp/ssh-XXXX/) can be handed in from /tmp or /run")
			}
			ents, err := os.ReadDir(dir)
			if err != nil {
				return refuse(reason(err))
			}
			if len(ents) != 1 {
				return refuse("shares its directory " + quote(dir) + " with other entries, which would be handed in too")
			}
			s.Bind = dir
		}
		if hostpath.Within(p.Repo, s.Bind) {
			return refuse("contains the repository")
		}
		p.Sockets = append(p.Sockets, s)
	}
	return nil
}
