package prepare

import (
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/nsinit"
)

// The launcher decides what to protect from paths, then both backends open those
// paths again, without following symlinks. A process that swaps a component of the
// repository's path in between (another session whose writable repository contains
// this one, or any process of yours) could make the plan describe one tree and the
// mounts another. So the repository is identified (device and inode, opened with no
// symlink in any component) before the plan is made, and checked again, with every
// protected path, right before the backend starts; the backends then open each path
// without following symlinks (nsinit's capture, bwrap's --bind-fd), and check that
// what they opened has the identity seen here (mounts.Op.SourceID), so a swap after
// this check fails the launch instead of redirecting a mount.

func Identify(path string) (mounts.FileID, error) {
	fd, err := safepath.Open(path, unix.O_PATH)
	if err != nil {
		return mounts.FileID{}, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return mounts.FileID{}, err
	}
	return mounts.FileID{Dev: st.Dev, Ino: st.Ino}, nil
}

// repoIdentity identifies the repository before anything is planned.
func repoIdentity(repo string) (mounts.FileID, error) {
	id, err := Identify(repo)
	if err != nil {
		return id, fmt.Errorf("repo %s: %w (a path component changed while agentbox was starting?)", repo, err)
	}
	return id, nil
}

// verifyUnchanged checks, right before launch, that the repository is still the one
// planned for and that every protected path exists with no symlink on its way. The
// repository's identity and its .git are read through one descriptor, so that both
// answers are about the same resolution of its path: a component flipped to a link
// between two lookups (the race behind TestSetupRaces' "repo path component") cannot
// pass one check in one state and skip the other in the next.
//
// It adds to ids the identity it saw of the repository and of each protected path,
// which Build puts on their binds (mounts.Session.SourceIDs) and the backend checks
// again on the source it opens: a directory swapped for another between this check
// and the backend's capture (two real directories exchanged, no link involved) fails
// the launch too, instead of binding the repository from one tree and its
// protections from the other.
func verifyUnchanged(repo string, want mounts.FileID, prot []mounts.Protected, ids map[string]mounts.FileID) error {
	changed := func(why string) error {
		return fmt.Errorf("repo %s changed while agentbox was starting (%s); not launching", repo, why)
	}
	rfd, err := safepath.Open(repo, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return changed(err.Error())
	}
	defer unix.Close(rfd)
	switch err := nsinit.CheckSourceID(rfd, want); {
	case errors.Is(err, nsinit.ErrSourceChanged):
		return changed("another directory is at its path")
	case err != nil:
		return changed(err.Error())
	}
	ids[repo] = want
	have := map[string]bool{}
	for _, p := range prot {
		id, err := Identify(p.Path)
		if err != nil {
			return fmt.Errorf("%s changed while agentbox was starting (%v); not launching", p.Path, err)
		}
		have[p.Path] = true
		ids[p.Path] = id
	}
	// The protected set was computed from paths: had a component been swapped for a
	// link to elsewhere at that moment, it could have come out empty. Seen now, from
	// the descriptor identified above and without following a link, a .git directory
	// must have its config and hooks in the set, a .git file itself.
	dotgit := filepath.Join(repo, ".git")
	var gst unix.Stat_t
	switch err := unix.Fstatat(rfd, ".git", &gst, unix.AT_SYMLINK_NOFOLLOW); {
	case err == unix.ENOENT:
		return nil // not a repository of its own: nothing of Git's to protect
	case err != nil:
		return changed(err.Error())
	}
	var need []string
	switch gst.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		need = []string{filepath.Join(dotgit, "config"), filepath.Join(dotgit, "hooks")}
	case unix.S_IFREG:
		need = []string{dotgit}
	default:
		return nil // a symlink: the set holds what it leads to, checked above
	}
	for _, n := range need {
		if !have[n] {
			return fmt.Errorf("%s changed while agentbox was starting (%s is not protected); not launching", repo, n)
		}
	}
	return nil
}
