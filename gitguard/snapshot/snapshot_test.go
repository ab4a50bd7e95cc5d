package snapshot

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// snapRepo makes a repository with two commits on main, a tag and a branch.
func snapRepo(t testing.TB, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.LocalGit(t, dir, "init", "-q", "-b", "main")
	writeFile(t, filepath.Join(dir, "a.txt"), "one\n")
	testenv.LocalGit(t, dir, "add", "a.txt")
	testenv.LocalGit(t, dir, "commit", "-q", "-m", "one")
	testenv.LocalGit(t, dir, "tag", "v1")
	writeFile(t, filepath.Join(dir, "b.txt"), "two\n")
	testenv.LocalGit(t, dir, "add", "b.txt")
	testenv.LocalGit(t, dir, "commit", "-q", "-m", "two")
	testenv.LocalGit(t, dir, "branch", "side")
	return dir
}

func writeFile(t testing.TB, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// tmpDir is a canonical temporary directory (t.TempDir may lie below a symlink).
func tmpDir(t testing.TB) string { return testenv.CanonTempDir(t) }

// node is one file, directory or symlink of a tree, as compared byte for byte.
type node struct {
	kind fs.FileMode // 0, ModeDir or ModeSymlink
	perm fs.FileMode
	data string // file content or symlink target
}

func (n node) String() string {
	return fmt.Sprintf("%v %o %q", n.kind, n.perm, n.data)
}

// diskTree reads the tree at root without following symlinks. Sockets and FIFOs,
// which a snapshot skips, are left out.
func diskTree(t testing.TB, root string) map[string]node {
	t.Helper()
	out := map[string]node{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.IsDir():
			out[rel] = node{kind: fs.ModeDir, perm: fi.Mode().Perm()}
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = node{kind: fs.ModeSymlink, data: target}
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = node{perm: fi.Mode().Perm(), data: string(b)}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func compareTrees(t testing.TB, what string, want, got map[string]node) {
	t.Helper()
	var diffs []string
	for p, w := range want {
		g, ok := got[p]
		switch {
		case !ok:
			diffs = append(diffs, "missing "+p)
		case g != w:
			diffs = append(diffs, fmt.Sprintf("%s: got %v, want %v", p, g, w))
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			diffs = append(diffs, "extra "+p)
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		if len(diffs) > 20 {
			diffs = append(diffs[:20], "…")
		}
		t.Errorf("%s differs from the source:\n%s", what, strings.Join(diffs, "\n"))
	}
	if len(want) == 0 {
		t.Errorf("%s: empty source tree", what)
	}
}

// snapCase is a repository layout and what its manifest must say.
type snapCase struct {
	name string
	// setup builds the fixture below base and returns the work tree to snapshot
	// and the expected gitdir, common dir and pointer file.
	setup func(t *testing.T, base string) (repo, gitDir, commonDir, dotGit string)
	// headRef is the expected "head" field; "" means "a commit id equal to
	// rev-parse HEAD".
	headRef string
	unborn  bool
}

var snapCases = []snapCase{
	{
		name: "standard",
		setup: func(t *testing.T, base string) (string, string, string, string) {
			r := snapRepo(t, filepath.Join(base, "repo"))
			return r, r + "/.git", r + "/.git", ""
		},
		headRef: "ref: refs/heads/main",
	},
	{
		name: "linked worktree",
		setup: func(t *testing.T, base string) (string, string, string, string) {
			r := snapRepo(t, filepath.Join(base, "main"))
			wt := filepath.Join(base, "wt")
			testenv.LocalGit(t, r, "worktree", "add", "-q", "-b", "feature", wt)
			writeFile(t, filepath.Join(wt, "c.txt"), "three\n")
			testenv.LocalGit(t, wt, "add", "c.txt")
			testenv.LocalGit(t, wt, "commit", "-q", "-m", "three")
			return wt, r + "/.git/worktrees/wt", r + "/.git", wt + "/.git"
		},
		headRef: "ref: refs/heads/feature",
	},
	{
		name: "superproject with submodule",
		setup: func(t *testing.T, base string) (string, string, string, string) {
			sub := snapRepo(t, filepath.Join(base, "sub"))
			r := snapRepo(t, filepath.Join(base, "super"))
			testenv.LocalGit(t, r, "-c", "protocol.file.allow=always", "submodule", "add", "-q", sub, "lib")
			testenv.LocalGit(t, r, "commit", "-q", "-m", "add lib")
			if _, err := os.Stat(r + "/.git/modules/lib/HEAD"); err != nil {
				t.Fatalf("fixture: submodule gitdir missing: %v", err)
			}
			return r, r + "/.git", r + "/.git", ""
		},
		headRef: "ref: refs/heads/main",
	},
	{
		name: "submodule work tree",
		setup: func(t *testing.T, base string) (string, string, string, string) {
			sub := snapRepo(t, filepath.Join(base, "sub"))
			r := snapRepo(t, filepath.Join(base, "super"))
			testenv.LocalGit(t, r, "-c", "protocol.file.allow=always", "submodule", "add", "-q", sub, "lib")
			return r + "/lib", r + "/.git/modules/lib", r + "/.git/modules/lib", r + "/lib/.git"
		},
		headRef: "ref: refs/heads/main",
	},
	{
		name: "no commits yet",
		setup: func(t *testing.T, base string) (string, string, string, string) {
			r := filepath.Join(base, "empty")
			os.Mkdir(r, 0o755)
			testenv.LocalGit(t, r, "init", "-q", "-b", "main")
			return r, r + "/.git", r + "/.git", ""
		},
		headRef: "ref: refs/heads/main",
		unborn:  true,
	},
	{
		name: "detached HEAD",
		setup: func(t *testing.T, base string) (string, string, string, string) {
			r := snapRepo(t, filepath.Join(base, "repo"))
			testenv.LocalGit(t, r, "checkout", "-q", "--detach", "HEAD~1")
			return r, r + "/.git", r + "/.git", ""
		},
	},
	{
		name: "packed refs only",
		setup: func(t *testing.T, base string) (string, string, string, string) {
			r := snapRepo(t, filepath.Join(base, "repo"))
			testenv.LocalGit(t, r, "gc", "-q")
			testenv.LocalGit(t, r, "pack-refs", "--all", "--prune")
			if ents, _ := os.ReadDir(r + "/.git/refs/heads"); len(ents) != 0 {
				t.Fatalf("fixture: loose refs remain: %v", ents)
			}
			if m, _ := filepath.Glob(r + "/.git/objects/pack/*.pack"); len(m) == 0 {
				t.Fatal("fixture: no pack after gc")
			}
			return r, r + "/.git", r + "/.git", ""
		},
		headRef: "ref: refs/heads/main",
	},
	{
		name: "symlink inside .git",
		setup: func(t *testing.T, base string) (string, string, string, string) {
			r := snapRepo(t, filepath.Join(base, "repo"))
			// A hook linked to another file of hooks/ and a directory link:
			// stored as links, not as what they point at.
			if err := os.Symlink("pre-commit.sample", r+"/.git/hooks/pre-commit"); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("refs/tags", r+"/.git/tags-link"); err != nil {
				t.Fatal(err)
			}
			return r, r + "/.git", r + "/.git", ""
		},
		headRef: "ref: refs/heads/main",
	},
}

func checkHead(t *testing.T, tc snapCase, repo string, m Manifest) {
	t.Helper()
	if tc.unborn {
		if m.HeadCommit != "" {
			t.Errorf("head_commit %q for an unborn branch", m.HeadCommit)
		}
	} else if want := testenv.LocalGit(t, repo, "rev-parse", "HEAD"); m.HeadCommit != want {
		t.Errorf("head_commit %q, want %s", m.HeadCommit, want)
	}
	want := tc.headRef
	if want == "" {
		want = m.HeadCommit
	}
	if m.Head != want {
		t.Errorf("head %q, want %q", m.Head, want)
	}
}

// mountTmpfs mounts a tmpfs at dir for the duration of the test.
func mountTmpfs(t *testing.T, dir string, flags uintptr, opts string) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, "mounting a tmpfs needs root (CI runs the tests as root)")
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", flags, opts); err != nil {
		t.Fatalf("mount tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
}

// sameManifest compares manifests; times by instant, as JSON keeps no location.
func sameManifest(a, b Manifest) bool {
	ta, tb := a.Time, b.Time
	a.Time, b.Time = time.Time{}, time.Time{}
	return a == b && ta.Equal(tb)
}
