package prepare

import (
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/safepath"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/policy"
)

// prepareKept creates, on the host, what a preset keeps and is missing (an empty
// directory, mode 0700, or a file with the preset's content, mode 0600), so that
// there is something to bind, and the read-only directories inside the kept ones,
// as Git's hooks placeholder is created (P7). Nothing is followed: a component
// that is a symlink stops the launch.
func prepareKept(p *policy.Policy) error {
	for _, k := range p.Keep {
		if !k.Create {
			continue
		}
		if err := createBeneath(k.Path, k.Dir, k.Init); err != nil {
			return fmt.Errorf("%s: create %s: %w", k.From, k.Path, err)
		}
	}
	for _, d := range append(append([]string(nil), p.KeepReadOnly...), p.KeepPrivate...) {
		if err := createBeneath(d, true, ""); err != nil {
			return fmt.Errorf("--keep-agent: create %s: %w", d, err)
		}
	}
	return nil
}

// createBeneath creates path (a directory, or a file holding init) unless it
// exists as that, and fails when it exists as something else.
func createBeneath(path string, dir bool, init string) error {
	parent, name := filepath.Split(path)
	dfd, err := safepath.Open(filepath.Clean(parent), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if dir {
		err = unix.Mkdirat(dfd, name, 0o700)
	} else {
		var fd int
		fd, err = unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == nil {
			_, err = unix.Write(fd, []byte(init))
			unix.Close(fd)
		}
	}
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	switch {
	case dir && st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return errors.New("exists and is not a directory")
	case !dir && st.Mode&unix.S_IFMT != unix.S_IFREG:
		return errors.New("exists and is not a regular file")
	}
	return nil
}

// checkKeptGitDirs refuses a kept path holding one of the Git directories this
// session protects outside the repository (a linked worktree's common dir): kept,
// its config and hooks would be writable, undoing P7.
func checkKeptGitDirs(p *policy.Policy, gitDirs []string) error {
	for _, k := range p.Keep {
		for _, d := range gitDirs {
			if hostpath.Within(d, k.Path) || hostpath.Within(k.Path, d) {
				return &policy.Error{What: k.From, Path: k.Path, Reason: "holds the Git directory " + d + " of this worktree, whose config and hooks must stay read-only (P7)"}
			}
		}
	}
	return nil
}

// keptIdentities adds to ids the identity every kept and added directory has now,
// which Build puts on their binds and the backends check again on the source they
// open (mounts.Op.SourceID): a path swapped after the policy checked it is refused.
func keptIdentities(p *policy.Policy, ids map[string]mounts.FileID) error {
	want := append([]string(nil), p.AddDirs...)
	if p.Home != "" { // kept paths are bound over the HOME overlay, and only then
		for _, k := range p.Keep {
			want = append(want, k.Path)
		}
		want = append(want, p.KeepReadOnly...)
	}
	for _, path := range want {
		id, err := identify(path)
		if err != nil {
			return fmt.Errorf("%s changed while agentbox was starting (%v); not launching", path, err)
		}
		ids[path] = id
	}
	return nil
}
