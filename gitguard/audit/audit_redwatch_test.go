package audit

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// Hostile mutations (red team): each makes the end scan differ from a full scan
// if the watch misses it.
func init() {
	// A hard link from a watched, clean directory into a directory made during the
	// session (no mark): the open, the write and the link's ATTRIB reach no mark.
	sinceMutations["red: written through a link in a new directory"] = func(r string) error {
		nd := filepath.Join(r, "src/d05/newdir")
		if err := os.Mkdir(nd, 0o755); err != nil {
			return err
		}
		if err := linkWrite(filepath.Join(r, "src/d14/f01"), filepath.Join(nd, "alias")); err != nil {
			return err
		}
		return os.Remove(nd)
	}
	sinceMutations["red: chmod through a link in a new directory"] = func(r string) error {
		nd := filepath.Join(r, "src/d05/newdir")
		if err := os.Mkdir(nd, 0o755); err != nil {
			return err
		}
		alias := filepath.Join(nd, "alias")
		if err := os.Link(filepath.Join(r, "src/d14/f02"), alias); err != nil {
			return err
		}
		return os.Chmod(alias, 0o755)
	}
	// The same through a nested repository's gitdir, which is read afresh but not
	// marked.
	sinceMutations["red: written through a link in a nested gitdir"] = func(r string) error {
		return linkWrite(filepath.Join(r, "src/d14/f03"), filepath.Join(r, "src/d24/.git/alias"))
	}
}

// linkWrite makes alias a hard link to file, writes through it and removes it.
func linkWrite(file, alias string) error {
	if err := os.Link(file, alias); err != nil {
		return err
	}
	if err := writeAt(alias, "EVIL", 0); err != nil {
		return err
	}
	return os.Remove(alias)
}

func init() {
	// A directory the launch scan did not read (past the entry bound) has no
	// mark: made readable, linked into, written through, locked again... and even
	// removed, so the end walk is complete.
	sinceMutations["red-launch: through a directory past MaxEntries"] = func(r string) error {
		u := filepath.Join(r, "src/d09/locked") // mode 0300: linkable, not listable
		if err := linkWrite(filepath.Join(r, "src/d14/f04"), filepath.Join(u, "alias")); err != nil {
			return err
		}
		if err := os.Remove(filepath.Join(u, "x")); err != nil {
			return err
		}
		return os.Remove(u)
	}
	// One the launch read though the user had made it unreadable
	// (audit_unreadable_linux.go) has its mark.
	sinceMutations["red-launch: through a directory unreadable at launch"] = sinceMutations["red-launch: through a directory past MaxEntries"]
	// A directory below MaxDepth has no mark either.
	sinceMutations["red-launch: through a directory below MaxDepth"] = func(r string) error {
		if err := linkWrite(filepath.Join(r, "src/d14/f05"), filepath.Join(r, "src/d08/a/b/c/d/e/f/alias")); err != nil {
			return err
		}
		return os.RemoveAll(filepath.Join(r, "src/d08/a"))
	}
}

// TestSinceUnwatchedAtLaunch: a directory of the tree the launch scan did not read
// (unreadable, below the depth bound, past the entry bound) carries no mark, so a
// hard link made in it to a file of a watched directory, and a write through it,
// would reach no mark: the watch must vouch for nothing, and the end scan walk.
// Run as the test user (root reads a mode-0300 directory).
func TestSinceUnwatchedAtLaunch(t *testing.T) {
	if !testenv.AsTestUser(t) {
		return
	}
	requireWatch(t)
	for _, tc := range []struct {
		name       string
		setup      func(f *fixture)
		maxDepth   int
		maxEntries int
	}{
		{"red-launch: through a directory unreadable at launch", func(f *fixture) {
			f.Write("src/d09/locked/x", "x\n", 0o644)
			if err := os.Chmod(filepath.Join(f.Repo, "src/d09/locked"), 0o300); err != nil {
				t.Fatal(err)
			}
		}, 0, 0},
		{"red-launch: through a directory below MaxDepth", func(f *fixture) {
			f.Write("src/d08/a/b/c/d/e/f/x", "x\n", 0o644)
		}, 5, 0},
		{"red-launch: through a directory past MaxEntries", func(f *fixture) {
			f.Write("src/d09/locked/x", "x\n", 0o644)
		}, 0, 150},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			for d := range 16 {
				for i := range 8 {
					f.Write(fmt.Sprintf("src/d%02d/f%02d", d, i), "content\n", 0o644)
				}
			}
			tc.setup(f)
			opt := ScanOptions{Walk: true, Home: f.Home, MaxDepth: tc.maxDepth, MaxEntries: tc.maxEntries}
			launch := watchedScan(t, f.Repo, opt)
			if strings.Contains(tc.name, "unreadable") {
				// Read all the same, and marked: the watch sees what is done there.
				if len(launch.Skipped) != 0 {
					t.Fatalf("the launch scan skipped %v", launch.Skipped)
				}
				runSinceMutation(t, tc.name, f.Repo)
				launch.Launch.Stop()
				since, full := sinceAndFull(t, f.Repo, opt, launch.Launch)
				sameScans(t, since, full)
				return
			}
			if len(launch.Skipped) == 0 {
				t.Fatal("the launch scan skipped nothing: the case does not test what it says")
			}
			runSinceMutation(t, tc.name, f.Repo)
			launch.Launch.Stop()
			if launch.Launch.Lost() == "" {
				t.Fatal("part of the tree was not watched, and the watch still vouches for the rest")
			}
			since, full := sinceAndFull(t, f.Repo, opt, launch.Launch)
			if taken := sameScans(t, since, full); taken != 0 {
				t.Errorf("the end scan took %d listings from a watch that vouches for nothing", taken)
			}
		})
	}
}

func init() {
	// Overlayfs (which a sandbox can mount in a user namespace of its own) whose
	// upper layer is a watched directory: does a write through the overlay reach
	// the upper directory's mark? Overlayfs wants its work directory on the upper
	// directory's mount, and the sandbox's only writable mount of the tree's
	// filesystem is the tree's own bind (an --add-dir that overlaps it is refused,
	// .git is a bind of its own), so the work directory is one of the tree's: here
	// src/d12, planted before the launch. The mount makes src/d12/work in it. (On
	// Linux 6.1 overlayfs writes to the upper file with no fsnotify event at all:
	// a work directory outside the tree, on the tree's mount, which only a process
	// outside the sandbox has, leaves the write unseen, listings read whole or not.)
	overlay := func(r string, writeOnly bool) error {
		mnt := filepath.Join(filepath.Dir(r), "ovlmnt")
		os.MkdirAll(mnt, 0o755)
		opts := "lowerdir=" + filepath.Join(r, "src/d11") + ",upperdir=" + filepath.Join(r, "src/d10") + ",workdir=" + filepath.Join(r, "src/d12")
		if err := unix.Mount("ovl", mnt, "overlay", 0, opts); err != nil {
			return err
		}
		err := writeAt(filepath.Join(mnt, "f01"), "OVL", 0)
		if err == nil && !writeOnly {
			err = os.Chmod(filepath.Join(mnt, "f02"), 0o755)
		}
		if uerr := unix.Unmount(mnt, 0); err == nil {
			err = uerr
		}
		// The work directory overlayfs made is mode 0: each scan would widen it
		// (audit_unreadable_linux.go) and change its ctime, so that no two scans
		// agree on it. Made and gone, it still stops the watch vouching.
		work := filepath.Join(r, "src/d12/work")
		if err == nil {
			err = os.Chmod(work, 0o700)
		}
		if err == nil {
			err = os.RemoveAll(work)
		}
		return err
	}
	sinceMutations["red: written through an overlay over a watched directory"] = func(r string) error { return overlay(r, false) }
	sinceMutations["red: written through an overlay over a watched directory, nothing else"] = func(r string) error { return overlay(r, true) }
}
