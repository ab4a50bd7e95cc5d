package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/termsafe"
)

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
		return fmt.Errorf("sandbox: InitBinary %s lies in %s, which the session can write: it could replace the init of the next launch; install agentbox outside it", q, termsafe.Quote(root))
	}
	for _, dir := range dirs {
		if root, ok := hostpath.InsideWritable(dir, writable...); ok {
			return fmt.Errorf("sandbox: InitBinary %s leads through %s, which the session can write: it could redirect the init of the next launch; install agentbox outside it", q, termsafe.Quote(root))
		}
		top := hostpath.GitTopLevel(dir)
		if _, err := os.Lstat(filepath.Join(top, ".git")); err == nil {
			return fmt.Errorf("sandbox: InitBinary %s lies in or leads through the Git working tree %s, which a session may write: it could replace the init of the next launch; install agentbox outside any repository", q, termsafe.Quote(top))
		}
	}
	return nil
}

// pathDirs resolves the absolute path one name at a time, as exec does, and returns
// the (resolved) directory of every symlink it passes, of a file or of a directory,
// and of the file it ends at.
func pathDirs(path string) ([]string, error) {
	var dirs []string
	todo := strings.Split(path, "/")
	cur, links := "/", 0
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		if err != nil {
			return nil, err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > 40 {
			return nil, errors.New("too many levels of symbolic links")
		}
		target, err := os.Readlink(next)
		if err != nil {
			return nil, err
		}
		dirs = append(dirs, cur)
		if filepath.IsAbs(target) {
			cur = "/"
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return append(dirs, filepath.Dir(cur)), nil
}
