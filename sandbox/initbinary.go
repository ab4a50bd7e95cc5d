package sandbox

import (
	"fmt"
	"os"
	"path/filepath"

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
// and after its symlinks are resolved.
func checkInitBinary(bin string, writable ...string) error {
	if bin == "" {
		return nil
	}
	q := termsafe.Quote(bin)
	if !filepath.IsAbs(bin) {
		return fmt.Errorf("sandbox: InitBinary %s is not an absolute path: name the installed agentbox by its full path", q)
	}
	canon, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return fmt.Errorf("sandbox: InitBinary %s: %v", q, err)
	}
	if root, ok := hostpath.InsideWritable(bin, writable...); ok {
		return fmt.Errorf("sandbox: InitBinary %s lies in %s, which the session can write: it could replace the init of the next launch; install agentbox outside it", q, termsafe.Quote(root))
	}
	for _, dir := range []string{filepath.Dir(filepath.Clean(bin)), filepath.Dir(canon)} {
		top := hostpath.GitTopLevel(dir)
		if _, err := os.Lstat(filepath.Join(top, ".git")); err == nil {
			return fmt.Errorf("sandbox: InitBinary %s lies in the Git working tree %s, which a session may write: it could replace the init of the next launch; install agentbox outside any repository", q, termsafe.Quote(top))
		}
	}
	return nil
}
