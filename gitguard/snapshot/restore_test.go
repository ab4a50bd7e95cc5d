package snapshot

import (
	"archive/zip"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// zent is one entry of a hand-made archive.
type zent struct {
	name string
	mode fs.FileMode
	data string
}

func validManifestJSON(t testing.TB) string {
	t.Helper()
	b, err := json.Marshal(Manifest{
		Format: ManifestFormat, Repo: "/src/proj", GitCommonDir: "/src/proj/.git", GitDir: "/src/proj/.git",
		Head: "ref: refs/heads/main", Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), AgentboxVersion: "t",
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// makeZip writes the entries, in order, to dir/name.
func makeZip(t testing.TB, dir, name string, ents []zent) string {
	t.Helper()
	p := filepath.Join(dir, name)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zw := zip.NewWriter(f)
	for _, e := range ents {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		h.SetMode(e.mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(e.data))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// goodEntries is a minimal valid snapshot.
func goodEntries(t testing.TB) []zent {
	return []zent{
		{ManifestName, 0o600, validManifestJSON(t)},
		{"git-common/", fs.ModeDir | 0o755, ""},
		{"git-common/HEAD", 0o644, "ref: refs/heads/main\n"},
		{"git-common/objects/", fs.ModeDir | 0o755, ""},
		{"git-common/refs/", fs.ModeDir | 0o755, ""},
	}
}

func TestRestoreRefusesHostileArchives(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra []zent
		want  string
	}{
		{"absolute path", []zent{{"/tmp/evil", 0o644, "x"}}, "not a relative path"},
		{"dot-dot", []zent{{"git-common/../../evil", 0o644, "x"}}, `".." component`},
		{"dot-dot directory", []zent{{"git-common/a/../../../", fs.ModeDir | 0o755, ""}}, `".." component`},
		{"empty component", []zent{{"git-common//x", 0o644, "x"}}, "empty"},
		{"outside the layout", []zent{{"evil.sh", 0o755, "x"}}, "not part of an agentbox snapshot"},
		{"absolute symlink", []zent{{"git-common/l", fs.ModeSymlink | 0o777, "/etc"}}, "absolute path"},
		{"symlink out of the gitdir", []zent{{"git-common/hooks/l", fs.ModeSymlink | 0o777, "../../x"}}, "leads out"},
		{"symlink from the top", []zent{{"git-common/l", fs.ModeSymlink | 0o777, ".."}}, "leads out"},
		{"dot-dot after a name", []zent{
			{"git-common/b", fs.ModeSymlink | 0o777, "."},
			{"git-common/c", fs.ModeSymlink | 0o777, "b/b/../.."},
		}, "after a directory name"},
		{"write through a symlink", []zent{
			{"git-common/hooks", fs.ModeSymlink | 0o777, "objects"},
			{"git-common/hooks/pre-commit", 0o755, "x"},
		}, "below the symlink"},
		{"symlink listed after its child", []zent{
			{"git-common/d/f", 0o644, "x"},
			{"git-common/d", fs.ModeSymlink | 0o777, "objects"},
		}, "below the symlink"},
		{"duplicate", []zent{{"git-common/HEAD", 0o644, "evil"}}, "twice"},
		{"named pipe", []zent{{"git-common/fifo", fs.ModeNamedPipe | 0o644, ""}}, "neither file"},
		{"symlink manifest", []zent{{DotGitName, fs.ModeSymlink | 0o777, "x"}}, "regular file"},
		{"file as tree root", []zent{{"git-worktree", 0o644, "x"}}, "not part of"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := tmpDir(t)
			zp := makeZip(t, base, "s.zip", append(goodEntries(t), tc.extra...))
			into := filepath.Join(base, "out")
			_, err := Restore(zp, into)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Restore: %v; want an error with %q", err, tc.want)
			}
			assertOnly(t, base, "s.zip")
		})
	}
}

// assertOnly fails unless dir holds exactly the names given.
func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if strings.Join(got, " ") != strings.Join(names, " ") {
		t.Errorf("%s holds %v, want %v", dir, got, names)
	}
}

func TestRestoreNeedsManifest(t *testing.T) {
	base := tmpDir(t)
	for name, ents := range map[string][]zent{
		"none.zip":    goodEntries(t)[1:],
		"invalid.zip": append([]zent{{ManifestName, 0o600, `{"format": 99}`}}, goodEntries(t)[1:]...),
	} {
		zp := makeZip(t, base, name, ents)
		if _, err := Restore(zp, filepath.Join(base, "out")); err == nil || !strings.Contains(err.Error(), "manifest") {
			t.Errorf("%s: Restore: %v; want a manifest error", name, err)
		}
	}
	writeFile(t, base+"/notzip.zip", "hello")
	if _, err := Restore(base+"/notzip.zip", filepath.Join(base, "out")); err == nil {
		t.Error("Restore of a non-ZIP succeeded")
	}
	if _, err := os.Lstat(filepath.Join(base, "out")); err == nil {
		t.Error("a failed restore created its target")
	}
}

func TestRestoreTarget(t *testing.T) {
	base := tmpDir(t)
	zp := makeZip(t, base, "s.zip", goodEntries(t))

	// A non-empty target, such as a live repository, is refused and left alone.
	live := snapRepo(t, filepath.Join(base, "live"))
	before := diskTree(t, live)
	if _, err := Restore(zp, live); !errors.Is(err, ErrTargetNotEmpty) {
		t.Errorf("restore over a live repository: %v, want ErrTargetNotEmpty", err)
	}
	compareTrees(t, "live repository after a refused restore", before, diskTree(t, live))

	// A file, and a symlink to an empty directory, are refused too.
	writeFile(t, base+"/file", "x")
	os.Mkdir(base+"/empty2", 0o755)
	os.Symlink("empty2", base+"/link")
	for _, p := range []string{base + "/file", base + "/link"} {
		if _, err := Restore(zp, p); !errors.Is(err, ErrTargetNotEmpty) {
			t.Errorf("restore into %s: %v, want ErrTargetNotEmpty", p, err)
		}
	}
	if ents, _ := os.ReadDir(base + "/empty2"); len(ents) != 0 {
		t.Error("restore wrote through a symlinked target")
	}

	// An empty directory is fine.
	os.Mkdir(base+"/empty", 0o755)
	res, err := Restore(zp, base+"/empty")
	if err != nil {
		t.Fatal(err)
	}
	if res.Entries != len(goodEntries(t)) || res.Manifest.Repo != "/src/proj" {
		t.Errorf("restored %+v", res)
	}
	if b, err := os.ReadFile(base + "/empty/.git/HEAD"); err != nil || string(b) != "ref: refs/heads/main\n" {
		t.Errorf(".git/HEAD = %q, %v", b, err)
	}
	for _, e := range []string{"empty", "empty2", "file", "link", "live", "s.zip"} {
		if _, err := os.Lstat(filepath.Join(base, e)); err != nil {
			t.Error(err)
		}
	}
	assertOnly(t, base, "empty", "empty2", "file", "link", "live", "s.zip")
}

func TestRestoreModes(t *testing.T) {
	base := tmpDir(t)
	zp := makeZip(t, base, "s.zip", append(goodEntries(t),
		zent{"git-common/hooks/", fs.ModeDir | 0o750, ""},
		zent{"git-common/hooks/pre-commit", 0o755, "#!/bin/sh\n"},
		zent{"git-common/hooks/setuid", fs.ModeSetuid | fs.ModeSetgid | 0o755, "x"},
		zent{"git-common/hooks/l", fs.ModeSymlink | 0o777, "pre-commit"},
		zent{"git-common/objects/ab/", fs.ModeDir | 0o555, ""},
		zent{"git-common/objects/ab/cdef", 0o444, "obj"},
		zent{"git-worktree/", fs.ModeDir | 0o700, ""},
		zent{"git-worktree/commondir", 0o600, "../..\n"},
		zent{DotGitName, 0o644, "gitdir: /src/main/.git/worktrees/wt\n"},
	))
	into := filepath.Join(base, "out")
	if _, err := Restore(zp, into); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(into+"/.git/objects/ab", 0o755) })
	for p, want := range map[string]fs.FileMode{
		"":                       fs.ModeDir | 0o700,
		".git/hooks":             fs.ModeDir | 0o750,
		".git/hooks/pre-commit":  0o755,
		".git/hooks/setuid":      0o755,
		".git/hooks/l":           fs.ModeSymlink | 0o777,
		".git/objects/ab":        fs.ModeDir | 0o555,
		".git/objects/ab/cdef":   0o444,
		"git-worktree":           fs.ModeDir | 0o700,
		"git-worktree/commondir": 0o600,
		"dotgit":                 0o644,
		"manifest.json":          0o600,
	} {
		fi, err := os.Lstat(filepath.Join(into, p))
		if err != nil {
			t.Error(err)
			continue
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode(), want)
		}
	}
	if target, _ := os.Readlink(into + "/.git/hooks/l"); target != "pre-commit" {
		t.Errorf("symlink target %q", target)
	}
}

// TestRestoreFIFO: a FIFO given to restore as the ZIP does not hang it.
func TestRestoreFIFO(t *testing.T) {
	dir := t.TempDir()
	zfifo := filepath.Join(dir, "fifo.zip")
	if err := syscall.Mkfifo(zfifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(zfifo, filepath.Join(dir, "out")); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Restore of a FIFO: %v", err)
	}
}
