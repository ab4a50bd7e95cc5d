package snapshot

import (
	"archive/zip"
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testenv"
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

// zipTree reads the entries below prefix ("git-common/") of an archive, or the single
// entry named prefix when it is a file.
func zipTree(t testing.TB, zr *zip.Reader, prefix string) map[string]node {
	t.Helper()
	out := map[string]node{}
	for _, f := range zr.File {
		if !strings.HasPrefix(f.Name, prefix) {
			continue
		}
		rel := strings.TrimSuffix(strings.TrimPrefix(f.Name, prefix), "/")
		if rel == "" {
			rel = "."
		}
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		m := f.Mode()
		switch {
		case m.IsDir():
			out[rel] = node{kind: fs.ModeDir, perm: m.Perm()}
		case m&fs.ModeSymlink != 0:
			out[rel] = node{kind: fs.ModeSymlink, data: string(b)}
		default:
			out[rel] = node{perm: m.Perm(), data: string(b)}
		}
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

func openZip(t testing.TB, path string) *zip.Reader {
	t.Helper()
	zr, err := zip.OpenReader(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { zr.Close() })
	return &zr.Reader
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

func TestSnapshotLayouts(t *testing.T) {
	for _, tc := range snapCases {
		t.Run(tc.name, func(t *testing.T) {
			base := tmpDir(t)
			repo, gitDir, commonDir, dotGit := tc.setup(t, base)
			saveDir := filepath.Join(base, "saves")
			if err := os.Mkdir(saveDir, 0o755); err != nil {
				t.Fatal(err)
			}
			before := diskTree(t, commonDir)

			s, err := SaveSnapshot(SnapshotOptions{Repo: repo, Dir: saveDir, Keep: DefaultKeep, Version: "test-1.2"})
			if err != nil {
				t.Fatal(err)
			}
			if s == nil {
				t.Fatal("no snapshot of a Git work tree")
			}
			checkSnapshotFile(t, s.Path, saveDir, filepath.Base(repo))

			m := s.Manifest
			if m.Repo != repo || m.GitDir != gitDir || m.GitCommonDir != commonDir || m.DotGitFile != dotGit || m.AgentboxVersion != "test-1.2" {
				t.Errorf("manifest = %+v, want repo %s, git dir %s, common dir %s, dotgit %q", m, repo, gitDir, commonDir, dotGit)
			}
			checkHead(t, tc, repo, m)

			// The archive, read independently, holds exactly the source trees.
			zr := openZip(t, s.Path)
			if zr.File[0].Name != ManifestName {
				t.Errorf("first entry %s, want %s", zr.File[0].Name, ManifestName)
			}
			onDisk, err := readManifestFile(s.Path)
			if err != nil || !sameManifest(*onDisk, m) {
				t.Errorf("manifest in the ZIP = %+v, %v; want %+v", onDisk, err, m)
			}
			compareTrees(t, "git-common/", diskTree(t, commonDir), zipTree(t, zr, CommonPrefix))
			if gitDir != commonDir {
				compareTrees(t, "git-worktree/", diskTree(t, gitDir), zipTree(t, zr, WorktreePrefix))
			} else if len(zipTree(t, zr, WorktreePrefix)) != 0 {
				t.Error("git-worktree/ stored for a work tree without a separate gitdir")
			}
			checkPointer(t, zr, dotGit)
			checkMethods(t, zr)

			// Restored, the trees are the source again, and Git reads them.
			into := filepath.Join(base, "restored")
			res, err := Restore(s.Path, into)
			if err != nil {
				t.Fatal(err)
			}
			if !sameManifest(*res.Manifest, m) {
				t.Errorf("restored manifest %+v, want %+v", res.Manifest, m)
			}
			compareTrees(t, "restored .git", diskTree(t, commonDir), diskTree(t, into+"/.git"))
			if gitDir != commonDir {
				compareTrees(t, "restored git-worktree", diskTree(t, gitDir), diskTree(t, into+"/git-worktree"))
			}
			if tc.name != "linked worktree" && !tc.unborn {
				// --work-tree overrides a submodule's relative core.worktree.
				if got := testenv.LocalGit(t, base, "--git-dir", into+"/.git", "--work-tree", into, "rev-parse", "HEAD"); got != m.HeadCommit {
					t.Errorf("restored HEAD %s, want %s", got, m.HeadCommit)
				}
			}

			// The snapshot changed nothing.
			compareTrees(t, "source after the snapshot", before, diskTree(t, commonDir))
		})
	}
}

// sameManifest compares manifests; times by instant, as JSON keeps no location.
func sameManifest(a, b Manifest) bool {
	ta, tb := a.Time, b.Time
	a.Time, b.Time = time.Time{}, time.Time{}
	return a == b && ta.Equal(tb)
}

func checkSnapshotFile(t *testing.T, path, dir, base string) {
	t.Helper()
	if filepath.Dir(path) != dir || !snapshotName(base).MatchString(filepath.Base(path)) {
		t.Errorf("snapshot %s: want %s/%s.git-save-YYYYMMDD-HHMMSS.zip", path, dir, base)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != 0o600 {
		t.Errorf("snapshot mode %v, want -rw-------", fi.Mode())
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temporary file %s left in %s", e.Name(), dir)
		}
	}
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

func checkPointer(t *testing.T, zr *zip.Reader, dotGit string) {
	t.Helper()
	got := zipTree(t, zr, DotGitName)
	if dotGit == "" {
		if len(got) != 0 {
			t.Error("dotgit stored for a work tree whose .git is a directory")
		}
		return
	}
	b, err := os.ReadFile(dotGit)
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := got["."]; !ok || n.data != string(b) {
		t.Errorf("dotgit entry %v, want the content of %s: %q", n, dotGit, b)
	}
}

// checkMethods asserts that objects are stored and text metadata deflated.
func checkMethods(t *testing.T, zr *zip.Reader) {
	t.Helper()
	for _, f := range zr.File {
		if !f.Mode().IsRegular() {
			continue
		}
		name := f.Name
		obj := strings.Contains(name, "/objects/pack/") || (strings.Contains(name, "/objects/") && storeAsIs(name))
		switch {
		case obj && f.Method != zip.Store:
			t.Errorf("%s: method %d, want stored", name, f.Method)
		case strings.HasSuffix(name, "/config") && f.Method != zip.Deflate:
			t.Errorf("%s: method %d, want deflated", name, f.Method)
		}
	}
}

func TestSnapshotNotAWorkTree(t *testing.T) {
	base := tmpDir(t)
	plain := filepath.Join(base, "plain")
	os.Mkdir(plain, 0o755)
	dangling := filepath.Join(base, "dangling")
	os.Mkdir(dangling, 0o755)
	writeFile(t, dangling+"/.git", "gitdir: /nonexistent/x\n")
	for _, repo := range []string{plain, dangling} {
		s, err := SaveSnapshot(SnapshotOptions{Repo: repo})
		if s != nil || err != nil {
			t.Errorf("%s: snapshot %v, %v; want none", repo, s, err)
		}
	}
	if ents, _ := os.ReadDir(base); len(ents) != 2 {
		t.Errorf("files appeared in %s: %v", base, ents)
	}
}

func TestSnapshotDefaultDirIsParent(t *testing.T) {
	base := tmpDir(t)
	repo := snapRepo(t, filepath.Join(base, "proj"))
	s, err := SaveSnapshot(SnapshotOptions{Repo: repo, Keep: DefaultKeep})
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshotFile(t, s.Path, base, "proj")
}

func TestSnapshotRefusesDirInsideRepo(t *testing.T) {
	base := tmpDir(t)
	repo := snapRepo(t, filepath.Join(base, "proj"))
	for _, dir := range []string{repo, repo + "/saves", repo + "/.git"} {
		os.MkdirAll(dir, 0o755)
		if _, err := SaveSnapshot(SnapshotOptions{Repo: repo, Dir: dir}); err == nil || !strings.Contains(err.Error(), dir) {
			t.Errorf("Dir %s: err %v, want a refusal naming it", dir, err)
		}
	}
}

func TestSnapshotSameSecondDoesNotOverwrite(t *testing.T) {
	base := tmpDir(t)
	repo := snapRepo(t, filepath.Join(base, "proj"))
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.Local)
	first, err := SaveSnapshot(SnapshotOptions{Repo: repo, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(first.Path)
	// A new commit between the two makes their contents differ.
	writeFile(t, repo+"/c.txt", "c\n")
	testenv.LocalGit(t, repo, "add", "c.txt")
	testenv.LocalGit(t, repo, "commit", "-q", "-m", "c")
	var paths []string
	for range 3 {
		s, err := SaveSnapshot(SnapshotOptions{Repo: repo, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, filepath.Base(s.Path))
	}
	wantNames := []string{"proj.git-save-20260102-030405-2.zip", "proj.git-save-20260102-030405-3.zip", "proj.git-save-20260102-030405-4.zip"}
	if filepath.Base(first.Path) != "proj.git-save-20260102-030405.zip" || strings.Join(paths, " ") != strings.Join(wantNames, " ") {
		t.Errorf("names %s then %v, want proj.git-save-20260102-030405.zip then %v", filepath.Base(first.Path), paths, wantNames)
	}
	if got, _ := os.ReadFile(first.Path); !bytes.Equal(got, want) {
		t.Error("the first snapshot was overwritten")
	}
}

func TestSnapshotRetention(t *testing.T) {
	base := tmpDir(t)
	repo := snapRepo(t, filepath.Join(base, "a", "proj"))
	other := snapRepo(t, filepath.Join(base, "b", "proj")) // same name, other repository
	saves := filepath.Join(base, "saves")
	os.Mkdir(saves, 0o700)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.Local)

	// Two snapshots of the other repository, older than all of ours.
	for i := range 2 {
		if _, err := SaveSnapshot(SnapshotOptions{Repo: other, Dir: saves, Now: t0.Add(time.Duration(i-10) * time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	// Files that look like ours but are not snapshots of this repository.
	writeFile(t, saves+"/proj.git-save-20000101-000000.zip", "not a zip")
	writeFile(t, saves+"/proj.git-save-old.zip", "x")
	writeFile(t, saves+"/project.git-save-20000101-000000.zip", "x")

	var made []string
	for i := range 7 {
		s, err := SaveSnapshot(SnapshotOptions{Repo: repo, Dir: saves, Keep: 3, Now: t0.Add(time.Duration(i) * time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		if s.PruneErr != nil {
			t.Fatal(s.PruneErr)
		}
		made = append(made, s.Path)
	}
	for i, p := range made {
		_, err := os.Stat(p)
		if kept := i >= len(made)-3; kept != (err == nil) {
			t.Errorf("snapshot %d (%s): exists=%v, want %v", i, filepath.Base(p), err == nil, kept)
		}
	}
	ents, _ := os.ReadDir(saves)
	if len(ents) != 3+2+3 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("saves holds %v; want our newest 3, the other repository's 2 and the 3 unrelated files", names)
	}

	// A clock set back: the new snapshot sorts oldest but is kept all the same.
	s, err := SaveSnapshot(SnapshotOptions{Repo: repo, Dir: saves, Keep: 3, Now: t0.Add(-24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Path); err != nil {
		t.Errorf("retention removed the snapshot it had just written: %v", err)
	}
	if len(s.Pruned) != 1 || s.Pruned[0] != made[4] {
		t.Errorf("pruned %v, want the oldest other one %s", s.Pruned, made[4])
	}
}

// TestSnapshotDiskFull fills a small tmpfs: the launch must fail with the path, and
// neither a partial ZIP nor a temporary file may remain.
func TestSnapshotDiskFull(t *testing.T) {
	base := tmpDir(t)
	repo := snapRepo(t, filepath.Join(base, "proj"))
	big := make([]byte, 2<<20)
	rand.Read(big)
	if err := os.WriteFile(repo+"/big.bin", big, 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.LocalGit(t, repo, "add", "big.bin")
	testenv.LocalGit(t, repo, "commit", "-q", "-m", "big")
	before := diskTree(t, repo+"/.git")

	full := filepath.Join(base, "full")
	os.Mkdir(full, 0o755)
	mountTmpfs(t, full, 0, "size=256k")

	_, err := SaveSnapshot(SnapshotOptions{Repo: repo, Dir: full})
	if err == nil {
		t.Fatal("snapshot to a full filesystem succeeded")
	}
	if !errors.Is(err, unix.ENOSPC) || !strings.Contains(err.Error(), full+"/proj.git-save-") {
		t.Errorf("error %q: want ENOSPC naming %s/proj.git-save-…", err, full)
	}
	if ents, _ := os.ReadDir(full); len(ents) != 0 {
		t.Errorf("left behind in %s: %v", full, ents)
	}
	compareTrees(t, "repository after the failed snapshot", before, diskTree(t, repo+"/.git"))
}

// TestSnapshotDirNotWritable: a read-only filesystem as root, a mode-0555 directory
// otherwise.
func TestSnapshotDirNotWritable(t *testing.T) {
	base := tmpDir(t)
	repo := snapRepo(t, filepath.Join(base, "proj"))
	ro := filepath.Join(base, "ro")
	os.Mkdir(ro, 0o755)
	if os.Geteuid() == 0 {
		mountTmpfs(t, ro, unix.MS_RDONLY, "")
	} else {
		os.Chmod(ro, 0o555)
		t.Cleanup(func() { os.Chmod(ro, 0o755) })
	}
	_, err := SaveSnapshot(SnapshotOptions{Repo: repo, Dir: ro})
	if err == nil || !strings.Contains(err.Error(), ro+"/proj.git-save-") {
		t.Fatalf("error %v: want a failure naming %s/proj.git-save-…", err, ro)
	}
}

// TestSnapshotUnreadableObject: a file of .git the user cannot read stops the snapshot.
func TestSnapshotUnreadableObject(t *testing.T) {
	if !testenv.AsTestUser(t) { // root would read what the test makes unreadable
		return
	}
	base := tmpDir(t)
	repo := snapRepo(t, filepath.Join(base, "proj"))
	obj, _ := filepath.Glob(repo + "/.git/objects/??/*")
	os.Chmod(obj[0], 0)
	_, err := SaveSnapshot(SnapshotOptions{Repo: repo})
	if err == nil || !strings.Contains(err.Error(), obj[0]) || !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("error %v: want permission denied naming %s", err, obj[0])
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

// TestSnapshotOddRepoName: a repository whose name holds a space, a newline and
// regular-expression characters is saved, pruned and restored like any other.
func TestSnapshotOddRepoName(t *testing.T) {
	base := tmpDir(t)
	repo := snapRepo(t, filepath.Join(base, "a b\nc.*"))
	var last *Snapshot
	for i := range 3 {
		s, err := SaveSnapshot(SnapshotOptions{Repo: repo, Keep: 2, Now: time.Date(2026, 1, 1, 0, 0, i, 0, time.Local)})
		if err != nil {
			t.Fatal(err)
		}
		last = s
	}
	if m, _ := filepath.Glob(filepath.Join(base, "a b\nc.\\*.git-save-*.zip")); len(m) != 2 {
		t.Errorf("snapshots %v, want 2 after pruning", m)
	}
	res, err := Restore(last.Path, filepath.Join(base, "out"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Manifest.Repo != repo {
		t.Errorf("manifest repo %q, want %q", res.Manifest.Repo, repo)
	}
}

// TestSnapshotPlantedSpecialFiles: what an earlier session could leave in .git — a
// FIFO where a ref should be, packed-refs linked to /dev/zero — neither blocks nor
// floods the launch; the FIFO is left out of the archive, the link stored as a link.
func TestSnapshotPlantedSpecialFiles(t *testing.T) {
	base := tmpDir(t)
	repo := snapRepo(t, filepath.Join(base, "proj"))
	ref := repo + "/.git/refs/heads/main"
	os.Remove(ref)
	if err := unix.Mkfifo(ref, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(repo + "/.git/packed-refs")
	if err := os.Symlink("/dev/zero", repo+"/.git/packed-refs"); err != nil {
		t.Fatal(err)
	}
	s, err := SaveSnapshot(SnapshotOptions{Repo: repo})
	if err != nil {
		t.Fatal(err)
	}
	if s.Manifest.HeadCommit != "" || s.Manifest.Head != "ref: refs/heads/main" {
		t.Errorf("head %q, head_commit %q; want the symref and no commit", s.Manifest.Head, s.Manifest.HeadCommit)
	}
	tree := zipTree(t, openZip(t, s.Path), CommonPrefix)
	if _, ok := tree["refs/heads/main"]; ok {
		t.Error("the FIFO was archived")
	}
	if n := tree["packed-refs"]; n != (node{kind: fs.ModeSymlink, data: "/dev/zero"}) {
		t.Errorf("packed-refs stored as %v, want a symlink to /dev/zero", n)
	}
}

// TestSnapshotBounds: a sandbox can plant a huge (sparse) file or a flood of entries
// in .git; the snapshot stops at its bounds, names where, and leaves nothing behind.
func TestSnapshotBounds(t *testing.T) {
	base := tmpDir(t)
	repo := snapRepo(t, filepath.Join(base, "proj"))
	out := filepath.Join(base, "out")
	os.Mkdir(out, 0o755)

	// Within the bounds first: the default ones take this repository.
	if _, err := SaveSnapshot(SnapshotOptions{Repo: repo, Dir: out, Now: time.Unix(1, 0)}); err != nil {
		t.Fatalf("snapshot within the bounds: %v", err)
	}
	written, _ := os.ReadDir(out)

	planted := filepath.Join(repo, ".git", "objects", "pack", "pack-planted.pack")
	f, err := os.Create(planted)
	if err != nil {
		t.Fatal(err)
	}
	// 1 TiB, sparse: reading it would take hours and store it, a terabyte.
	if err := f.Truncate(1 << 40); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = SaveSnapshot(SnapshotOptions{Repo: repo, Dir: out})
	if !errors.Is(err, ErrSnapshotTooLarge) || !strings.Contains(err.Error(), planted) || !strings.Contains(err.Error(), "--git-save-max-size") {
		t.Fatalf("error %v: want the size bound, naming %s and the flag", err, planted)
	}
	os.Remove(planted)

	_, err = SaveSnapshot(SnapshotOptions{Repo: repo, Dir: out, MaxBytes: 1 << 10})
	if !errors.Is(err, ErrSnapshotTooLarge) {
		t.Errorf("MaxBytes 1 KiB: error %v, want ErrSnapshotTooLarge", err)
	}
	_, err = SaveSnapshot(SnapshotOptions{Repo: repo, Dir: out, MaxEntries: 10})
	if !errors.Is(err, ErrSnapshotTooLarge) || !strings.Contains(err.Error(), "more than 10 entries") {
		t.Errorf("MaxEntries 10: error %v, want the entry bound", err)
	}
	if ents, _ := os.ReadDir(out); len(ents) != len(written) {
		t.Errorf("failed snapshots left files in %s: %v (had %v)", out, ents, written)
	}
}
