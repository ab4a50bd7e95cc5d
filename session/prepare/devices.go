package prepare

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/mounts/build"
	"github.com/agentbox/agentbox/policy"
)

// deviceIdentities adds to ids the identity of each handed-in device (--device,
// --gpu), opened right before the launch without following a symlink and checked
// to still be a character device with the number the policy's device rule judged:
// the backends bind only a node with that identity (mounts.Op.SourceID), so one
// swapped for a disk, a terminal or anything else after the policy looked at it
// fails the launch.
func deviceIdentities(p *policy.Policy, ids map[string]mounts.FileID) error {
	for _, d := range p.Devices {
		fd, err := safepath.Open(d.Path, unix.O_PATH)
		if err != nil {
			return fmt.Errorf("%s %s: %w (it changed while agentbox was starting?)", d.From, d.Path, err)
		}
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("%s %s: %w", d.From, d.Path, err)
		}
		if d.RDev == 0 {
			return fmt.Errorf("%s %s: not judged by the device rule (no device number in the policy); not launching", d.From, d.Path)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFCHR || uint64(st.Rdev) != d.RDev {
			return fmt.Errorf("%s %s: no longer the character device agentbox checked (it changed while agentbox was starting); not launching", d.From, d.Path)
		}
		ids[d.Path] = mounts.FileID{Dev: st.Dev, Ino: st.Ino}
	}
	for _, h := range p.Hide {
		if h.Discard {
			return devNullIdentity(ids)
		}
	}
	return nil
}

// devNullIdentity adds /dev/null's identity, the stand-in of hidden histories
// (build.DevNull): the character device 1:3, or the launch is refused.
func devNullIdentity(ids map[string]mounts.FileID) error {
	fd, err := safepath.Open(build.DevNull, unix.O_PATH)
	if err != nil {
		return fmt.Errorf("--hide-secrets: %s: %w (the stand-in of the histories it hides)", build.DevNull, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("--hide-secrets: %s: %w", build.DevNull, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(uint64(st.Rdev)) != 1 || unix.Minor(uint64(st.Rdev)) != 3 {
		return fmt.Errorf("--hide-secrets: %s is not the null device (1:3), which stands in for the histories it hides; not launching", build.DevNull)
	}
	ids[build.DevNull] = mounts.FileID{Dev: st.Dev, Ino: st.Ino}
	return nil
}
