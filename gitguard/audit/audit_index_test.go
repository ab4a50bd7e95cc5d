package audit

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/gitindex"
)

// indexOf is a Git index of the given version whose entries name paths, with object
// ids of hashSize bytes; extended sets every entry's extended flags (version 3+).
func indexOf(version, hashSize int, extended bool, paths []string) []byte {
	return gitindex.Index{Version: version, OID: bytes.Repeat([]byte{0xab}, hashSize), Mode: 0o100644, Size: 3, Extended: extended}.Bytes(paths)
}

// gitIn runs the host's git in dir with no user or system config.
func gitIn(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME="+dir,
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestIndexOfGitItself: the indexes Git writes (versions 2, 3 and 4, SHA-1 and
// SHA-256, a split index's shared file) are read whole, and name nothing the audit
// refuses: an operator's own staging area is never taken for a plant.
func TestIndexOfGitItself(t *testing.T) {
	for _, form := range []struct {
		name string
		init []string
		then [][]string
	}{
		{"v2", nil, nil},
		{"v3 (intent to add)", nil, [][]string{{"add", "-N", "later/intent.txt"}}},
		{"v4", nil, [][]string{{"update-index", "--index-version", "4"}}},
		{"sha256 v4", []string{"--object-format=sha256"}, [][]string{{"update-index", "--index-version", "4"}}},
		{"split", nil, [][]string{{"update-index", "--split-index"}, {"add", "zz-after-split"}}},
		{"sparse", nil, [][]string{{"commit", "-qm", "x"}, {"sparse-checkout", "set", "--cone", "--sparse-index", "only"}}},
	} {
		t.Run(form.name, func(t *testing.T) {
			repo, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			gitIn(t, repo, append([]string{"init", "-q"}, form.init...)...)
			// Names of every length mod 8, nested and with common prefixes (v4's
			// compression), and a dot file.
			for i := 1; i <= 24; i++ {
				for _, p := range []string{strings.Repeat("a", i), "d/" + strings.Repeat("b", i) + ".go", "d/e/.hidden" + strings.Repeat("c", i)} {
					if err := os.MkdirAll(filepath.Join(repo, filepath.Dir(p)), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(repo, p), []byte(p), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, p := range []string{"later/intent.txt", "zz-after-split"} {
				os.MkdirAll(filepath.Join(repo, filepath.Dir(p)), 0o755)
				os.WriteFile(filepath.Join(repo, p), []byte("x"), 0o644)
			}
			gitIn(t, repo, "add", "a", "d")
			for _, args := range form.then {
				gitIn(t, repo, args...)
			}
			if form.name == "split" {
				// A changed entry of the shared index: the split index holds its
				// replacement, unnamed.
				if err := os.WriteFile(filepath.Join(repo, "a"), []byte("changed"), 0o644); err != nil {
					t.Fatal(err)
				}
				gitIn(t, repo, "add", "a")
			}
			s, err := Scan(repo, ScanOptions{})
			if err != nil {
				t.Fatal(err)
			}
			seen := 0
			for p, it := range s.Items {
				if it.Kind != KindIndex {
					continue
				}
				seen++
				if len(it.Dangers) > 0 {
					t.Errorf("%s: dangers %q in an index Git wrote", p, it.Dangers)
				}
			}
			want := 1
			if form.name == "split" {
				want = 2 // the index and its shared file
			}
			if seen != want {
				t.Errorf("%d index items, want %d: %v", seen, want, s.Items)
			}
		})
	}
}

// TestIndexNamingUnsafePaths: an index (or a split index's shared file) with an
// entry Git must not write — inside .git, through "..", absolute — is a danger
// naming it, in every version and object format; one that cannot be read as an
// index is a danger too.
func TestIndexNamingUnsafePaths(t *testing.T) {
	for _, c := range []struct {
		name     string
		file     string
		hashSize int
		index    []byte
		want     string
	}{
		{"v2 hook", "index", 20, indexOf(2, 20, false, []string{".git/hooks/post-checkout", "README"}), ".git/hooks/post-checkout"},
		{"v3 config, any case", "index", 20, indexOf(3, 20, true, []string{"A", ".GIT/config"}), ".GIT/config"},
		{"v4 through ..", "index", 20, indexOf(4, 20, false, []string{"README", "sub/../.git/hooks/pre-commit", "sub/x"}), "sub/../.git/hooks/pre-commit"},
		{"v4 absolute", "index", 20, indexOf(4, 20, false, []string{"/etc/x", "a"}), "/etc/x"},
		{"sha256 nested .git", "index", 32, indexOf(2, 32, false, []string{"m/.git/config", "n"}), "m/.git/config"},
		{"shared index", "sharedindex.0123456789abcdef0123456789abcdef01234567", 20, indexOf(2, 20, false, []string{".git/hooks/post-checkout"}), ".git/hooks/post-checkout"},
		{"count past the named", "index", 20, indexOf(2, 20, false, []string{".git/a", ".git/b", ".git/c", ".git/d", ".git/e"}), "and 2 more"},
		{"unnamed entry, no split index", "index", 20, indexOf(2, 20, false, []string{"", "a"}), `names ""`},
		{"truncated", "index", 20, indexOf(2, 20, false, []string{"a", "b"})[:40], "cannot be read as an index"},
		{"not an index", "index", 20, []byte("DIRX\x00\x00\x00\x02"), "cannot be read as an index"},
	} {
		t.Run(c.name, func(t *testing.T) {
			repo, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			git := filepath.Join(repo, ".git")
			for _, d := range []string{"objects", "refs"} {
				if err := os.MkdirAll(filepath.Join(git, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			config := "[core]\n\trepositoryformatversion = 0\n"
			if c.hashSize == 32 {
				config = "[core]\n\trepositoryformatversion = 1\n[extensions]\n\tobjectFormat = sha256\n"
			}
			files := map[string][]byte{"HEAD": []byte("ref: refs/heads/main\n"), "config": []byte(config), c.file: c.index}
			for name, b := range files {
				if err := os.WriteFile(filepath.Join(git, name), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			s, err := Scan(repo, ScanOptions{})
			if err != nil {
				t.Fatal(err)
			}
			it := s.Items[filepath.Join(git, c.file)]
			if it == nil || it.Kind != KindIndex {
				t.Fatalf("%s: not in the exec surface as an index: %+v", c.file, it)
			}
			if got := strings.Join(it.Dangers, "; "); !strings.Contains(got, c.want) {
				t.Errorf("dangers %q, want %q", got, c.want)
			}
			// The same index against a baseline that had it: not new, not reported.
			if f := Compare(s, s); len(f) != 0 {
				t.Errorf("an index the baseline had is reported: %v", f)
			}
		})
	}
}

// BenchmarkIndexRead measures what the audit adds per scan for a repository of
// 100,000 tracked files: reading its index (version 2, about 9 MB) entry by entry.
func BenchmarkIndexRead(b *testing.B) {
	paths := make([]string, 100_000)
	for i := range paths {
		paths[i] = fmt.Sprintf("src/module%03d/pkg%02d/file%05d.go", i%1000, i%37, i)
	}
	p := filepath.Join(b.TempDir(), "index")
	if err := os.WriteFile(p, indexOf(2, 20, false, paths), 0o644); err != nil {
		b.Fatal(err)
	}
	s := newScanner(filepath.Dir(p), filepath.Dir(p), ScanOptions{})
	s.relax = s.surface.relaxer()
	b.ResetTimer()
	for b.Loop() {
		if names, err := s.readIndex(p, 20); err != nil || names.N != 0 {
			b.Fatal(names, err)
		}
	}
}

// TestSparseIndexWithoutSparseSettings: a sparse index (directory entries naming
// trees) where no config turns index.sparse on is one Git did not write there,
// and expands at every read: a tree it names with a path Git refuses makes every
// Git command fail (gitguard.TestGitRefusesSparseIndexTreeNames). It is a danger,
// moved out with the way to rebuild the index; the same index in the sparse
// checkout Git made it for is not.
func TestSparseIndexWithoutSparseSettings(t *testing.T) {
	repo, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"keep", "sub"} {
		if err := os.MkdirAll(filepath.Join(repo, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, d, "f"), []byte(d), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitIn(t, repo, "init", "-q")
	gitIn(t, repo, "add", ".")
	gitIn(t, repo, "commit", "-qm", "init")
	gitIn(t, repo, "sparse-checkout", "set", "--cone", "--sparse-index", "keep")
	index := filepath.Join(repo, ".git", "index")
	dangers := func() string {
		t.Helper()
		s, err := Scan(repo, ScanOptions{})
		if err != nil {
			t.Fatal(err)
		}
		it := s.Items[index]
		if it == nil {
			t.Fatalf("the index is not in the exec surface: %v", s.Items)
		}
		return strings.Join(it.Dangers, "; ")
	}
	if d := dangers(); d != "" {
		t.Fatalf("the sparse checkout's own index: dangers %q", d)
	}
	// The operator's repository without sparse settings (git sparse-checkout keeps
	// them in config.worktree), and the session's sparse index in it.
	for _, f := range []string{"config.worktree", "info/sparse-checkout"} {
		if err := os.Remove(filepath.Join(repo, ".git", f)); err != nil {
			t.Fatal(err)
		}
	}
	gitIn(t, repo, "config", "--unset", "extensions.worktreeConfig")
	if d := dangers(); !strings.Contains(d, "is a sparse index (1 directory entries)") || !strings.Contains(d, "git reset rebuilds the index") {
		t.Errorf("a sparse index without index.sparse: dangers %q, want it moved out", d)
	}
	// The session's own config.worktree turning index.sparse on, which Git does
	// not read without extensions.worktreeConfig (and which is not protected
	// while it does not exist): the index is still one Git expands.
	worktreeConfig := filepath.Join(repo, ".git", "config.worktree")
	if err := os.WriteFile(worktreeConfig, []byte("[index]\n\tsparse = true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("git", "-C", repo, "config", "--get", "index.sparse").CombinedOutput(); err == nil {
		t.Fatalf("Git reads config.worktree without extensions.worktreeConfig: index.sparse = %q", out)
	}
	if d := dangers(); !strings.Contains(d, "is a sparse index (1 directory entries)") {
		t.Errorf("a sparse index with index.sparse only in a config.worktree Git does not read: dangers %q, want it moved out", d)
	}
	gitIn(t, repo, "config", "extensions.worktreeConfig", "true")
	if d := dangers(); d != "" {
		t.Errorf("a sparse index with index.sparse in the config.worktree Git reads: dangers %q", d)
	}
	if err := os.Remove(worktreeConfig); err != nil {
		t.Fatal(err)
	}
	gitIn(t, repo, "config", "index.sparse", "true")
	if d := dangers(); d != "" {
		t.Errorf("a sparse index with index.sparse in the repository's config: dangers %q", d)
	}
}
