package prepare

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/nsinit"
	"github.com/agentbox/agentbox/policy"
)

// --read-only (issue 16): the repository is bound read-only, a review session.
// Nothing the sandbox could write lies in it, so there are no protected Git paths,
// placeholders, pinned directories, metadata snapshot or Git audit; kept paths and
// their audit work as in any session.

// verifyLaunch re-checks, right before the launch, what the plan binds: the
// repository and its protected Git paths (verifyUnchanged), or, read-only, the
// repository alone. The identities it saw go to ids (mounts.Session.SourceIDs).
func verifyLaunch(p *policy.Policy, repoID mounts.FileID, prot []mounts.Protected, ids map[string]mounts.FileID) error {
	if !p.ReadOnly {
		return verifyUnchanged(p.Repo, repoID, prot, ids)
	}
	fd, err := safepath.Open(p.Repo, unix.O_PATH|unix.O_DIRECTORY)
	if err == nil {
		err = nsinit.CheckSourceID(fd, repoID)
		unix.Close(fd)
	}
	if errors.Is(err, nsinit.ErrSourceChanged) {
		err = errors.New("another directory is at its path")
	}
	if err != nil {
		return fmt.Errorf("repo %s changed while agentbox was starting (%v); not launching", p.Repo, err)
	}
	ids[p.Repo] = repoID
	return nil
}
