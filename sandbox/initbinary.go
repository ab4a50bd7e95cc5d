package sandbox

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/termsafe"
	"github.com/agentbox/agentbox/internal/trustedexec"
)

// openInitBinary opens bin once for the launch (nil for ""), after
// checkInitBinary, and returns the file the launch executes: every entry on the
// way owned by root or the user in directories only their owner writes
// (trustedexec.Program), and the file and each link the open followed checked
// again by checkInitBinary's rules, as the path may have led elsewhere by then.
// What a concurrent writer puts at the path after this is never run. The
// directories earlier sessions were given writable (hostpath.Granted) count as
// writable too: a session of last week with --add-dir ~/bin could have replaced
// the agentbox there.
func openInitBinary(bin string, writable ...string) (*os.File, error) {
	if bin == "" {
		return nil, nil
	}
	writable, granted, err := hostpath.WithGranted(writable...)
	if err != nil {
		return nil, fmt.Errorf("sandbox: InitBinary %s: %v", termsafe.Quote(bin), err)
	}
	if err := checkInitBinary(bin, writable...); err != nil {
		return nil, err
	}
	if bin == "/proc/self/exe" {
		return nil, nil // the kernel's link to the running binary: nsinit executes it as such
	}
	q := termsafe.Quote(bin)
	o, err := trustedexec.Program(bin, "agentbox")
	if err != nil {
		return nil, fmt.Errorf("sandbox: InitBinary %s: %v", q, err)
	}
	for _, p := range append([]string{o.Real}, o.Links...) {
		dir := filepath.Dir(p)
		root, ok := hostpath.InsideWritable(p, writable...)
		if !ok {
			root = granted.Holding(p)
		}
		if ok || root != "" {
			o.File.Close()
			return nil, fmt.Errorf("sandbox: InitBinary %s leads through %s (by that or another name), which a session can write: it could redirect the init of the next launch; install agentbox outside it", q, termsafe.Quote(root))
		}
		if top, ok := hostpath.GitTree(dir); ok {
			o.File.Close()
			return nil, fmt.Errorf("sandbox: InitBinary %s lies in or leads through the Git working tree %s, which a session may write: it could replace the init of the next launch; install agentbox outside any repository", q, termsafe.Quote(top))
		}
	}
	return o.File, nil
}

// checkInitBinary refuses an Options.InitBinary that a session could replace. It
// is executed by its path at each launch (and at each Prestart spare), as the
// user, before any mount protects anything: a file a session can write there is a
// program of the session's run on the host by the next launch. So it must be an
// absolute path (exec would look a bare name up on PATH), lie in none of the
// session's writable directories and in no Git working tree (a session of that
// repository could write it, as for the programs hostpath.LookPath finds), before
// and after its symlinks are resolved, nor the directory of any link on the way
// (replacing that link redirects the exec as replacing the file would).
func checkInitBinary(bin string, writable ...string) error {
	if bin == "" {
		return nil
	}
	q := termsafe.Quote(bin)
	if !filepath.IsAbs(bin) {
		return fmt.Errorf("sandbox: InitBinary %s is not an absolute path: name the installed agentbox by its full path", q)
	}
	dirs, err := pathDirs(bin)
	if err != nil {
		return fmt.Errorf("sandbox: InitBinary %s: %v", q, err)
	}
	dirs = append(dirs, filepath.Dir(filepath.Clean(bin)))
	if root, ok := hostpath.InsideWritable(bin, writable...); ok {
		return fmt.Errorf("sandbox: InitBinary %s lies in %s, which a session can write: it could replace the init of the next launch; install agentbox outside it", q, termsafe.Quote(root))
	}
	for _, dir := range dirs {
		if root, ok := hostpath.InsideWritable(dir, writable...); ok {
			return fmt.Errorf("sandbox: InitBinary %s leads through %s, which a session can write: it could redirect the init of the next launch; install agentbox outside it", q, termsafe.Quote(root))
		}
		if top, ok := hostpath.GitTree(dir); ok {
			return fmt.Errorf("sandbox: InitBinary %s lies in or leads through the Git working tree %s, which a session may write: it could replace the init of the next launch; install agentbox outside any repository", q, termsafe.Quote(top))
		}
	}
	return nil
}

// pathDirs resolves the absolute path as exec does (hostpath.Resolve) and returns
// the (resolved) directory of every symlink it passes, of a file or of a
// directory, and of the file it ends at.
func pathDirs(path string) ([]string, error) {
	r, err := hostpath.Resolve("/", path)
	switch {
	case err != nil:
		return nil, err
	case r.Missing:
		return nil, &fs.PathError{Op: "stat", Path: r.Path, Err: fs.ErrNotExist}
	}
	dirs := make([]string, 0, len(r.Links)+1)
	for _, l := range r.Links {
		dirs = append(dirs, filepath.Dir(l))
	}
	return append(dirs, filepath.Dir(r.Path)), nil
}
