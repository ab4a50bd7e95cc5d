package audit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/internal/treewalk"
	"github.com/agentbox/agentbox/internal/treewatch"
)

// sinceMutations are what a session does between the launch scan and the end
// scan, each run by another process (as the sandbox's are: an open by the
// scanning process itself is not a change). Each takes the repository.
var sinceMutations = map[string]func(repo string) error{
	"nothing": func(string) error { return nil },
	"edit in place": func(r string) error {
		return writeAt(filepath.Join(r, "src/d03/f05"), "Y", 0)
	},
	"append": func(r string) error {
		f, err := os.OpenFile(filepath.Join(r, "src/d03/f06"), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = f.WriteString("more\n")
		return err
	},
	"truncate by path": func(r string) error { return unix.Truncate(filepath.Join(r, "src/d04/f01"), 0) },
	"chmod":            func(r string) error { return os.Chmod(filepath.Join(r, "src/d04/f02"), 0o755) },
	"utimes": func(r string) error {
		return unix.UtimesNano(filepath.Join(r, "src/d04/f03"), []unix.Timespec{{Sec: 1}, {Sec: 1}})
	},
	"create": func(r string) error { return os.WriteFile(filepath.Join(r, "src/d05/sub/new"), []byte("n\n"), 0o644) },
	"new directories": func(r string) error {
		return os.MkdirAll(filepath.Join(r, "src/d05/a/b/c"), 0o755)
	},
	"remove":      func(r string) error { return os.Remove(filepath.Join(r, "src/d06/f01")) },
	"remove tree": func(r string) error { return os.RemoveAll(filepath.Join(r, "src/d07")) },
	"rename file": func(r string) error {
		if err := os.Rename(filepath.Join(r, "src/d08/f01"), filepath.Join(r, "src/d08/f01b")); err != nil {
			return err
		}
		return os.Rename(filepath.Join(r, "src/d08/f02"), filepath.Join(r, "src/d09/sub/f02"))
	},
	"rename directory": func(r string) error {
		return os.Rename(filepath.Join(r, "src/d10"), filepath.Join(r, "src/d10moved"))
	},
	"exchange directories": func(r string) error {
		return unix.Renameat2(unix.AT_FDCWD, filepath.Join(r, "src/d11"), unix.AT_FDCWD, filepath.Join(r, "src/d12"), unix.RENAME_EXCHANGE)
	},
	"directory made again": func(r string) error {
		// The same names, and on ext4 likely the same inode numbers.
		d := filepath.Join(r, "src/d13/sub")
		if err := os.RemoveAll(d); err != nil {
			return err
		}
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
		for i := range 8 {
			if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%02d", i)), []byte("again\n"), 0o644); err != nil {
				return err
			}
		}
		return nil
	},
	"hard link written, then removed": func(r string) error {
		// The file's own directory sees nothing: the link is made, written through
		// and removed in another.
		return linkWrite(filepath.Join(r, "src/d14/f00"), filepath.Join(r, "src/d15/alias"))
	},
	"written through an older hard link": func(r string) error {
		return writeAt(filepath.Join(r, "src/d17/linked"), "L", 0)
	},
	"written through a shared mapping": func(r string) error {
		f, err := os.OpenFile(filepath.Join(r, "src/d18/f00"), os.O_RDWR, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		m, err := unix.Mmap(int(f.Fd()), 0, 4, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			return err
		}
		copy(m, "MMAP")
		return unix.Munmap(m)
	},
	"directory replaced by a symlink": func(r string) error {
		if err := os.RemoveAll(filepath.Join(r, "src/d19")); err != nil {
			return err
		}
		return os.Symlink("d20", filepath.Join(r, "src/d19"))
	},
	"gitdir pointer planted": func(r string) error {
		return os.WriteFile(filepath.Join(r, "src/d21/.git"), []byte("gitdir: ../../../elsewhere\n"), 0o644)
	},
	".gitmodules edited in place": func(r string) error {
		return writeAt(filepath.Join(r, "src/d22/.gitmodules"), "[submodule \"x\"]\n\tupdate = !touch /tmp/pwned\n", 0)
	},
	"FIFO where Git opens a file": func(r string) error {
		return unix.Mkfifo(filepath.Join(r, "src/d23/.gitattributes"), 0o644)
	},
	"hook in a nested repository": func(r string) error {
		return os.WriteFile(filepath.Join(r, "src/d24/.git/hooks/pre-commit"), []byte("#!/bin/sh\ntouch /tmp/pwned\n"), 0o755)
	},
	"file in a nested repository's tree": func(r string) error {
		return os.WriteFile(filepath.Join(r, "src/d24/inner/new"), []byte("n\n"), 0o644)
	},
	"file at the top":   func(r string) error { return os.WriteFile(filepath.Join(r, "TOP"), []byte("t\n"), 0o644) },
	"chmod a directory": func(r string) error { return os.Chmod(filepath.Join(r, "src/d25/sub"), 0o700) },
	"utimes on a directory": func(r string) error {
		return unix.UtimesNano(filepath.Join(r, "src/d26"), []unix.Timespec{{Sec: 1}, {Sec: 1}})
	},
}

// sinceReread is how many directories the end scan reads again after a change
// that touches one file's content or attributes: none, the file's directory kept
// its names and the file alone is lstat'ed again (sinceRefreshed). A directory
// chmod'ed is read again itself; its parent's listing holds its changed stat.
var sinceReread = map[string]int{
	"edit in place": 0, "append": 0, "truncate by path": 0, "chmod": 0, "utimes": 0,
	"written through a shared mapping": 0, ".gitmodules edited in place": 0,
	"chmod a directory": 1, "utimes on a directory": 1,
}

// sinceRefreshed is how many entries of taken listings the end scan lstat's again
// after the changes of sinceReread.
var sinceRefreshed = map[string]int{
	"edit in place": 1, "append": 1, "truncate by path": 1, "chmod": 1, "utimes": 1,
	"written through a shared mapping": 1, ".gitmodules edited in place": 1,
	"chmod a directory": 1, "utimes on a directory": 1,
}

// sinceMakesDirs are the mutations that make a directory the watch does not mark:
// it then vouches for nothing (a hard link made in it would be unseen), and the
// end scan walks.
var sinceMakesDirs = map[string]bool{
	"new directories":                                true,
	"directory made again":                           true,
	"red: written through a link in a new directory": true,
	"red: chmod through a link in a new directory":   true,
	// overlayfs makes its work directory in the one it is given, one of the tree's
	"red: written through an overlay over a watched directory":               true,
	"red: written through an overlay over a watched directory, nothing else": true,
}

// sinceMounts are the mutations that mount (in a user and mount namespace of
// their own).
var sinceMounts = map[string]bool{"red: written through an overlay over a watched directory": true, "red: written through an overlay over a watched directory, nothing else": true}

func writeAt(p, s string, off int64) error {
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteAt([]byte(s), off)
	return err
}

// EnvSinceMutate makes the test binary run one of sinceMutations (TestMain).
const EnvSinceMutate = "AGENTBOX_TEST_SINCE_MUTATE"

func RunSinceMutation() {
	name, repo := os.Getenv(EnvSinceMutate), os.Getenv("AGENTBOX_TEST_SINCE_REPO")
	if err := sinceMutations[name](repo); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// TestSinceSameAsFullScan checks the end scan that takes the launch's listings
// (audit_since_linux.go) against a full scan of the tree as it is: after each kind
// of change a session can make, the same items, skipped places and walk — every
// entry's type, ctime and inode. It also checks that the listings were taken
// (where nothing changed, all of them), so the comparison is not of two full scans.
func TestSinceSameAsFullScan(t *testing.T) {
	requireWatch(t)
	for name := range sinceMutations {
		if strings.HasPrefix(name, "red-launch:") {
			continue // TestRedSinceUnwatchedAtLaunch's, with a tree of its own
		}
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			sinceTree(f, 27)
			f.Write("src/d22/.gitmodules", "[submodule \"x\"]\n\tpath = x\n\turl = ./x\n", 0o644)
			f.GitdirAt("src/d24/.git")
			if err := os.Mkdir(filepath.Join(f.Repo, "src/d24/.git/hooks"), 0o755); err != nil {
				t.Fatal(err)
			}
			f.Write("src/d24/inner/f", "x\n", 0o644)
			if err := os.Link(filepath.Join(f.Repo, "src/d16/f00"), filepath.Join(f.Repo, "src/d17/linked")); err != nil {
				t.Fatal(err)
			}
			opt := ScanOptions{Walk: true, Home: f.Home}
			launch := watchedScan(t, f.Repo, opt)
			dirs := 0 // the tree's directories, the top's and those below a nested repository's included
			filepath.WalkDir(f.Repo, func(p string, d os.DirEntry, err error) error {
				switch {
				case err != nil:
					return err
				case d.Name() == ".git":
					return filepath.SkipDir
				case d.IsDir():
					dirs++
				}
				return nil
			})
			runSinceMutation(t, name, f.Repo)
			launch.Launch.Stop()
			lost := launch.Launch.Lost()
			switch {
			case sinceMakesDirs[name] && lost == "":
				t.Fatal("a directory was made and the watch still vouches for the listings' stats")
			case !sinceMakesDirs[name] && lost != "":
				t.Fatalf("the watch lost track: %s", lost)
			}
			since, full := sinceAndFull(t, f.Repo, opt, launch.Launch)
			if lost == "" && since.Walk.Clock != launch.Walk.Clock {
				t.Error("the end scan's walk does not carry the launch walk's clock")
			}
			if (name == "nothing") != since.shared {
				t.Errorf("the end scan took the launch walk whole: %v", since.shared)
			}
			if name == "nothing" && (len(since.Walk.Entries) == 0 || &since.Walk.Entries[0] != &launch.Walk.Entries[0]) {
				t.Error("nothing changed, and the end scan built its walk again instead of taking the launch's")
			}
			refreshed := since.refreshed
			taken := sameScans(t, since, full)
			switch want, ok := sinceReread[name]; {
			case lost != "":
			case ok && taken != dirs-want:
				t.Errorf("%d of %d directories' listings were taken, want all but %d", taken, dirs, want)
			case ok && refreshed != sinceRefreshed[name]:
				t.Errorf("%d entries of the taken listings were lstat'ed again, want %d", refreshed, sinceRefreshed[name])
			case name == "nothing" && taken != dirs:
				t.Errorf("nothing changed, and %d of %d directories' listings were taken", taken, dirs)
			case taken < dirs/2:
				t.Errorf("only %d of %d directories' listings were taken", taken, dirs)
			}
		})
	}
}

// runSinceMutation runs one of sinceMutations on repo in another process (as a
// sandbox's are: an open by the scanning process itself is not a change).
func runSinceMutation(t *testing.T, name, repo string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), EnvSinceMutate+"="+name, "AGENTBOX_TEST_SINCE_REPO="+repo)
	if sinceMounts[name] {
		// Mounting in a user and mount namespace of its own, as a sandbox's
		// process would, and never in the host's mount table (a change to it
		// makes every prestarted sandbox of a test running beside this one
		// unusable: TestPrestartRunsInTheSpareAndRefills failed in CI).
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}}
	}
	out, err := cmd.CombinedOutput()
	var perr *os.PathError
	if sinceMounts[name] && errors.As(err, &perr) && (errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) ||
		errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EACCES)) {
		testenv.SkipKernel(t, "userns", "the mutation needs a user namespace: %v", err)
	}
	if err != nil {
		t.Fatalf("mutation: %v\n%s", err, out)
	}
}

// watchedScan is a launch scan of repo with a watch.
func watchedScan(t *testing.T, repo string, opt ScanOptions) *Surface {
	t.Helper()
	opt.Watch = true
	launch, err := Scan(repo, opt)
	if err != nil {
		t.Fatal(err)
	}
	if launch.Launch == nil {
		t.Fatal("no watch, though fanotify works here")
	}
	return launch
}

// sinceAndFull scans repo with opt and launch as Since, then without.
func sinceAndFull(t *testing.T, repo string, opt ScanOptions, launch *Launch) (since, full *Surface) {
	t.Helper()
	sinceOpt := opt
	sinceOpt.Since = launch
	since, err := Scan(repo, sinceOpt)
	if err != nil {
		t.Fatal(err)
	}
	if full, err = Scan(repo, opt); err != nil {
		t.Fatal(err)
	}
	return since, full
}

// sameScans fails unless the end scan since is the full scan full, clocks and
// counts aside; it returns how many listings since took from the launch.
func sameScans(t *testing.T, since, full *Surface) (taken int) {
	t.Helper()
	taken = since.taken
	since.Walk.Clock, full.Walk.Clock = treewalk.Clock{}, treewalk.Clock{}
	since.taken, since.refreshed, since.shared = 0, 0, false
	if !reflect.DeepEqual(since, full) {
		t.Errorf("the end scan differs from a full scan:\nitems %v\nwant  %v\nskipped %v\nwant    %v\nwalk: %s",
			itemPaths(since), itemPaths(full), since.Skipped, full.Skipped, walkDiff(since.Walk, full.Walk))
	}
	return taken
}

// requireWatch skips a test where a tree watch cannot mark a directory of
// TMPDIR's filesystem, as doctor's fanotify_fid check measures it.
func requireWatch(t *testing.T) {
	t.Helper()
	w, err := treewatch.New()
	if err == nil {
		defer w.Close()
		var fd int
		if fd, err = unix.Open(t.TempDir(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			_, err = w.Add(fd)
			unix.Close(fd)
		}
	}
	if err != nil {
		testenv.SkipKernel(t, "fanotify_fid", "unprivileged fanotify with file handles on TMPDIR's filesystem: %v", err)
	}
}

func itemPaths(s *Surface) []string {
	var out []string
	for p, it := range s.Items {
		out = append(out, p+" "+it.Sum+" "+fmt.Sprint(it.Dangers))
	}
	return out
}

func walkDiff(a, b *treewalk.Walk) string {
	if a.Complete != b.Complete || a.RootCtime != b.RootCtime || a.FineCtime != b.FineCtime {
		return fmt.Sprintf("complete %v/%v rootctime %d/%d fine %v/%v", a.Complete, b.Complete, a.RootCtime, b.RootCtime, a.FineCtime, b.FineCtime)
	}
	want := map[string]treewalk.Entry{}
	for _, e := range b.Entries {
		want[e.Rel] = e
	}
	for _, e := range a.Entries {
		if w, ok := want[e.Rel]; !ok || w != e {
			return fmt.Sprintf("%+v, want %+v (found %v)", e, w, ok)
		}
	}
	return fmt.Sprintf("%d entries, want %d", len(a.Entries), len(b.Entries))
}

// sinceTree writes dirs directories of eight files, each with a subdirectory of
// eight more: the tree the end-scan tests change.
func sinceTree(f *fixture, dirs int) {
	for d := range dirs {
		for i := range 8 {
			f.Write(fmt.Sprintf("src/d%02d/f%02d", d, i), "content\n", 0o644)
			f.Write(fmt.Sprintf("src/d%02d/sub/f%02d", d, i), "content\n", 0o644)
		}
	}
}

// TestSinceScanAllocatesNoHintedList: an end scan whose walk is the launch's
// (nothing changed) or is built in the launch walk's list (Scan) allocates no
// list of its own, however large the WalkHint the session passes it (the launch
// walk's length): a list of 100,000 entries is 4.5 MB, which, once the command
// has run long enough for the collector to free the launch's garbage, is
// memory to be zeroed and faulted in, only to be dropped.
func TestSinceScanAllocatesNoHintedList(t *testing.T) {
	requireWatch(t)
	for _, name := range []string{"nothing", "edit in place", "create"} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			sinceTree(f, 8)
			opt := ScanOptions{Walk: true, Home: f.Home}
			launch := watchedScan(t, f.Repo, opt)
			runSinceMutation(t, name, f.Repo)
			launch.Launch.Stop()
			if launch.Launch.Lost() != "" {
				t.Fatalf("the watch lost track: %s", launch.Launch.Lost())
			}
			sinceOpt := opt
			sinceOpt.Since = launch.Launch
			sinceOpt.WalkHint = 1 << 20 // 45 MB of entries
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			since, err := Scan(f.Repo, sinceOpt)
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > 8<<20 {
				t.Errorf("the end scan of a %d-entry tree allocated %d MB", len(since.Walk.Entries), n>>20)
			}
			full, err := Scan(f.Repo, opt)
			if err != nil {
				t.Fatal(err)
			}
			sameScans(t, since, full)
		})
	}
}

// TestSinceTakesGitDirLikeListings: a directory of the tree that Git would take
// for a bare repository (HEAD, objects/, refs/) is audited as a gitdir by an end
// scan that takes its listing from the launch (whose answer it reuses) as by a
// full scan, and one made into such a directory during the session is too.
func TestSinceTakesGitDirLikeListings(t *testing.T) {
	requireWatch(t)
	f := newFixture(t)
	sinceTree(f, 4)
	for _, d := range []string{"src/bare/objects", "src/bare/refs", "src/later/objects", "src/later/refs"} {
		if err := os.MkdirAll(filepath.Join(f.Repo, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f.Write("src/bare/HEAD", "ref: refs/heads/main\n", 0o644)
	f.Write("src/bare/config", "[core]\n\tfsmonitor = ./planted\n", 0o644)
	opt := ScanOptions{Walk: true, Home: f.Home}
	launch := watchedScan(t, f.Repo, opt)
	// Made a gitdir during the session: its listing is read again.
	f.Write("src/later/HEAD", "ref: refs/heads/main\n", 0o644)
	f.Write("src/later/config", "[core]\n\tfsmonitor = ./planted\n", 0o644)
	launch.Launch.Stop()
	since, full := sinceAndFull(t, f.Repo, opt, launch.Launch)
	if sameScans(t, since, full) == 0 {
		t.Fatal("the end scan took no listing from the launch")
	}
	for _, cfg := range []string{"src/bare/config", "src/later/config"} {
		if it := since.Items[filepath.Join(f.Repo, cfg)]; it == nil || len(it.Dangers) == 0 {
			t.Errorf("%s: the end scan did not audit it as a gitdir's config (item %+v)", cfg, it)
		}
	}
}
