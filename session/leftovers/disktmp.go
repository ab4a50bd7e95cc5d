package leftovers

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/agentbox/agentbox/internal/safepath"
	"github.com/agentbox/agentbox/internal/termsafe"
)

// MakeDiskTmp creates the session's --disk-tmp directory, mode 0700, below
// CACHE/tmp, and claims it for this launcher (Claim) so that `agentbox gc` leaves it
// alone while the launcher lives. release removes the directory, then the claim; a
// directory it cannot remove is named on warn, the session's warnings.
func MakeDiskTmp(cache string, warn io.Writer) (dir string, release func(), err error) {
	parent := filepath.Join(cache, "tmp")
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return "", nil, fmt.Errorf("--disk-tmp: create %s: %w", parent, err)
	}
	dir, err = os.MkdirTemp(parent, fmt.Sprintf("%d-%s-", os.Getpid(), time.Now().Format("20060102-150405")))
	if err != nil {
		return "", nil, fmt.Errorf("--disk-tmp: create session dir in %s: %w", parent, err)
	}
	lock, err := Claim(dir)
	if err == nil {
		err = os.Chmod(dir, 0o700)
	}
	// The sandbox owned this directory as its /tmp and may have left anything in it:
	// mode-000 or read-only directories, FIFOs, nesting deeper than PATH_MAX. Removed
	// with safepath.RemoveAll, which copes with each and follows no symlink.
	release = func() {
		if err := safepath.RemoveAll(dir); err != nil {
			// The error names what the sandbox left: a file name it chose.
			fmt.Fprintf(warn, "agentbox: --disk-tmp: %s (agentbox gc retries)\n", termsafe.String(err.Error()))
			return // keep the claim's file: gc decides by the lock, which dies with us
		}
		lock.Release()
	}
	if err != nil {
		release()
		return "", nil, fmt.Errorf("--disk-tmp: %s: %w", dir, err)
	}
	return dir, release, nil
}
