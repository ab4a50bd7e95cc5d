package audit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/agentbox/agentbox/internal/treewalk"
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
	requireWatch(t)
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
// every listing was the launch's; a directory it read again (here the top, made
// to look like another inode, as a host bind mount over the repository's path,
// which no mark sees, would) must not count towards it, even with as many entries.
func TestSharingOnlyWhatWasTaken(t *testing.T) {
	requireWatch(t)
	f := newFixture(t)
	for d := range 4 {
		for i := range 8 {
			f.Write(fmt.Sprintf("src/d%02d/f%02d", d, i), "content\n", 0o644)
		}
	}
	opt := ScanOptions{Walk: true, Home: f.Home}
	launch := watchedScan(t, f.Repo, opt)
	launch.Launch.Stop()
	if !launch.Launch.unchanged() {
		t.Fatalf("nothing changed, and the launch walk cannot be taken whole (lost %q)", launch.Launch.Lost())
	}
	launch.Launch.kept[f.Repo].dir.Ino ^= 1 // the top is read again at the end
	since, full := sinceAndFull(t, f.Repo, opt, launch.Launch)
	if since.shared {
		t.Error("a directory was read again, and the end scan took the launch walk whole")
	}
	// Sharing was planned and then refused: the scan is made again without the
	// watch (Scan), so it takes nothing.
	if taken := sameScans(t, since, full); taken != 0 {
		t.Errorf("%d listings taken from a launch whose walk could not be shared", taken)
	}
}
