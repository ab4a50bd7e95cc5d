package audit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testenv"
	"github.com/agentbox/agentbox/internal/treewalk"
	"github.com/agentbox/agentbox/internal/treewatch"
)

// review2OutsideLink is where TestSinceOutsideHardLink puts the second name of a
// working-tree file: beside the repository, on the same filesystem, in no
// directory the watch marks (as an --add-dir the sandbox may write, a package
// manager's store that hard-links into the tree (uv, pnpm), or a `cp -al` copy).
func review2OutsideLink(repo string) string { return filepath.Join(filepath.Dir(repo), "outside-link") }

func init() {
	sinceMutations["red-launch: review2: written through a link outside the tree"] = func(r string) error {
		return writeAt(review2OutsideLink(r), "EVIL", 0)
	}
}

// TestSinceOutsideHardLink: a file of the tree that has another name outside it,
// written through that name during the session. The write's events go to the
// outside directory's marks (none) and the file's own inode marks (none): the
// watch sees nothing, and the end scan must still not take the listing (before
// the watch, the end walk's lstat saw the new ctime).
func TestSinceOutsideHardLink(t *testing.T) {
	if w, err := treewatch.New(); err != nil {
		testenv.SkipKernel(t, "fanotify_fid", "unprivileged fanotify with file handles (Linux 5.17): %v", err)
	} else {
		w.Close()
	}
	const name = "red-launch: review2: written through a link outside the tree"
	f := newFixture(t)
	for d := range 4 {
		for i := range 8 {
			f.Write(fmt.Sprintf("src/d%02d/f%02d", d, i), "content\n", 0o644)
		}
	}
	if err := os.Link(filepath.Join(f.Repo, "src/d01/f03"), review2OutsideLink(f.Repo)); err != nil {
		t.Fatal(err)
	}
	opt := ScanOptions{Walk: true, Home: f.Home}
	launchOpt := opt
	launchOpt.Watch = true
	launch, err := Scan(f.Repo, launchOpt)
	if err != nil {
		t.Fatal(err)
	}
	if launch.Launch == nil {
		t.Fatal("no watch, though fanotify works here")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), EnvSinceMutate+"="+name, "AGENTBOX_TEST_SINCE_REPO="+f.Repo)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mutation: %v\n%s", err, out)
	}
	launch.Launch.Stop()
	sinceOpt := opt
	sinceOpt.Since = launch.Launch
	since, err := Scan(f.Repo, sinceOpt)
	if err != nil {
		t.Fatal(err)
	}
	full, err := Scan(f.Repo, opt)
	if err != nil {
		t.Fatal(err)
	}
	since.Walk.Clock, full.Walk.Clock = treewalk.Clock{}, treewalk.Clock{}
	since.taken = 0
	if !reflect.DeepEqual(since.Walk, full.Walk) {
		t.Errorf("the end scan's walk differs from a full scan's (lost %q): %s", launch.Launch.Lost(), walkDiff(since.Walk, full.Walk))
	}
}

// TestSharingOnlyWhatWasTaken: the end scan takes the launch walk whole only when
// every listing was the launch's; a directory it read again (here the top, found
// to be another inode: a host bind mount over the repository's path, which no
// mark sees) must not count towards it, even with as many entries.
func TestSharingOnlyWhatWasTaken(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (a bind mount)")
	}
	if w, err := treewatch.New(); err != nil {
		testenv.SkipKernel(t, "fanotify_fid", "unprivileged fanotify with file handles (Linux 5.17): %v", err)
	} else {
		w.Close()
	}
	f := newFixture(t)
	for d := range 4 {
		for i := range 8 {
			f.Write(fmt.Sprintf("src/d%02d/f%02d", d, i), "content\n", 0o644)
		}
	}
	// The same names, other inodes and ctimes (made before the launch: cp's
	// reads would be events).
	other := filepath.Join(filepath.Dir(f.Repo), "other")
	if out, err := exec.Command("cp", "-a", f.Repo, other).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	opt := ScanOptions{Walk: true, Home: f.Home}
	launchOpt := opt
	launchOpt.Watch = true
	launch, err := Scan(f.Repo, launchOpt)
	if err != nil {
		t.Fatal(err)
	}
	if launch.Launch == nil {
		t.Fatal("no watch, though fanotify works here")
	}
	if err := unix.Mount(other, f.Repo, "", unix.MS_BIND, ""); err != nil {
		t.Skipf("bind mount: %v", err)
	}
	defer unix.Unmount(f.Repo, unix.MNT_DETACH)
	launch.Launch.Stop()
	if lost := launch.Launch.Lost(); lost != "" {
		t.Skipf("the watch lost track: %s", lost)
	}
	sinceOpt := opt
	sinceOpt.Since = launch.Launch
	since, err := Scan(f.Repo, sinceOpt)
	if err != nil {
		t.Fatal(err)
	}
	full, err := Scan(f.Repo, opt)
	if err != nil {
		t.Fatal(err)
	}
	since.Walk.Clock, full.Walk.Clock = treewalk.Clock{}, treewalk.Clock{}
	if !reflect.DeepEqual(since.Walk, full.Walk) {
		t.Errorf("the end scan's walk differs from a full scan's: %s", walkDiff(since.Walk, full.Walk))
	}
}
