package gitguard

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/gitindex"
)

// sparseRepo is a repository whose index is a sparse index (cone "keep") with the
// directory entry "sub/", the operator's sparse-checkout settings then removed so
// that Git expands that index when it reads it.
type sparseRepo struct {
	t   *testing.T
	dir string
	env []string
}

func newSparseRepo(t *testing.T) *sparseRepo {
	r := &sparseRepo{t: t, dir: t.TempDir(), env: append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")}
	for _, d := range []string{"keep", "sub"} {
		if err := os.Mkdir(filepath.Join(r.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(r.dir, d, "f"), []byte(d), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r.git("init", "-q")
	r.git("add", ".")
	r.git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
	r.git("sparse-checkout", "init", "--cone", "--sparse-index")
	r.git("sparse-checkout", "set", "keep")
	if out := r.git("ls-files", "--sparse"); !strings.Contains(out, "sub/\n") {
		t.Fatalf("git wrote no sparse directory entry: %q", out)
	}
	return r
}

func (r *sparseRepo) run(args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", r.dir}, args...)...)
	cmd.Env = r.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (r *sparseRepo) git(args ...string) string {
	r.t.Helper()
	out, err := r.run(args...)
	if err != nil {
		r.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// tree writes a tree object of entries (mode, name, object id in hex) as given,
// names unchecked, as a session can (git hash-object --literally).
func (r *sparseRepo) tree(entries ...string) string {
	r.t.Helper()
	var b bytes.Buffer
	for i := 0; i+2 < len(entries); i += 3 {
		id, err := hex.DecodeString(entries[i+2])
		if err != nil {
			r.t.Fatal(err)
		}
		b.WriteString(entries[i] + " " + entries[i+1] + "\x00")
		b.Write(id)
	}
	cmd := exec.Command("git", "-C", r.dir, "hash-object", "-t", "tree", "--literally", "-w", "--stdin")
	cmd.Env, cmd.Stdin = r.env, &b
	out, err := cmd.Output()
	if err != nil {
		r.t.Fatalf("git hash-object: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// pointSubAt makes the index's "sub/" entry name tree id, and returns the index.
func (r *sparseRepo) pointSubAt(id string) []byte {
	r.t.Helper()
	p := filepath.Join(r.dir, ".git", "index")
	idx, err := os.ReadFile(p)
	if err != nil {
		r.t.Fatal(err)
	}
	oid, _ := hex.DecodeString(id)
	idx, ok := gitindex.PointSparseDir(idx, "sub/", oid)
	if !ok {
		r.t.Fatal("no sparse directory entry sub/ in the index")
	}
	if err := os.WriteFile(p, idx, 0o644); err != nil {
		r.t.Fatal(err)
	}
	return idx
}

// dropSparseSettings leaves the repository as one whose operator never enabled a
// sparse checkout (git sparse-checkout init keeps its settings in config.worktree).
func (r *sparseRepo) dropSparseSettings() {
	r.t.Helper()
	for _, f := range []string{"config.worktree", "info/sparse-checkout"} {
		if err := os.Remove(filepath.Join(r.dir, ".git", f)); err != nil {
			r.t.Fatal(err)
		}
	}
	r.git("config", "--unset", "extensions.worktreeConfig")
}

// TestGitRefusesSparseIndexTreeNames: a sparse index's directory entry "sub/" names a
// tree, which the session can write with any entry names ("..", ".git", "a/b").
// UnsafeIndexPaths reads the entry's name only; Git expanding the index (a
// repository without index.sparse, a command that needs the full index, `git
// sparse-checkout disable`) builds each entry with make_cache_entry, which refuses
// what verify_path refuses ("invalid path", Git 2.39 then crashes on the refused
// entry) before anything is written. The control shows the same expansion writes an
// ordinary tree's entries, so a Git that stops refusing fails this test.
func TestGitRefusesSparseIndexTreeNames(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed:", err)
	}
	type plant struct {
		name    string
		sub     func(r *sparseRepo, hook string) string // the tree "sub/" names
		written string                                  // where the hook would land
	}
	chain := func(r *sparseRepo, hook string, dirs ...string) string {
		id := r.tree("100755", "post-checkout", hook)
		for i := len(dirs) - 1; i >= 0; i-- {
			id = r.tree("40000", dirs[i], id)
		}
		return id
	}
	plants := []plant{
		{"dotdot", func(r *sparseRepo, h string) string { return chain(r, h, "..", ".git", "hooks") }, ".git/hooks/post-checkout"},
		{"slash", func(r *sparseRepo, h string) string { return r.tree("100755", "../.git/hooks/post-checkout", h) }, ".git/hooks/post-checkout"},
		{"nested", func(r *sparseRepo, h string) string { return chain(r, h, ".git", "hooks") }, "sub/.git/hooks/post-checkout"},
		{"nested-case", func(r *sparseRepo, h string) string { return chain(r, h, ".GIT", "hooks") }, "sub/.GIT/hooks/post-checkout"},
		{"deep", func(r *sparseRepo, h string) string { return chain(r, h, "a", "..", "..", ".git", "hooks") }, ".git/hooks/post-checkout"},
	}
	// The operator's commands, in a repository without sparse-checkout settings
	// (expanded on reading) and, for sparse-checkout disable, with them.
	commands := []struct {
		args   []string
		sparse bool
	}{
		{[]string{"checkout", "--", "."}, false}, {[]string{"restore", "."}, false},
		{[]string{"reset", "--hard"}, false}, {[]string{"checkout-index", "-a", "-f"}, false},
		{[]string{"sparse-checkout", "disable"}, false}, {[]string{"sparse-checkout", "disable"}, true},
		{[]string{"sparse-checkout", "add", "sub"}, true},
	}
	for _, p := range plants {
		for _, c := range commands {
			cmd := c.args
			r := newSparseRepo(t)
			hook := strings.TrimSpace(r.git("hash-object", "-w", "--stdin"))
			idx := r.pointSubAt(p.sub(r, hook))
			if bad, n, err := UnsafeIndexPaths(bufio.NewReader(bytes.NewReader(idx)), 20); err != nil || n != 0 {
				t.Fatalf("%s: the planted index reads as unsafe by its names (%q, %v): the test plants nothing new", p.name, bad, err)
			}
			if !c.sparse {
				r.dropSparseSettings()
			}
			out, _ := r.run(cmd...)
			if _, err := os.Lstat(filepath.Join(r.dir, p.written)); err == nil {
				t.Errorf("%s: git %s wrote %s from the sparse entry's tree", p.name, strings.Join(cmd, " "), p.written)
			}
			if !strings.Contains(out, "invalid path") {
				t.Errorf("%s: git %s does not refuse the tree's path: %s", p.name, strings.Join(cmd, " "), out)
			}
		}
	}
	// Control: an ordinary tree under "sub/" is expanded and its entries written by
	// git sparse-checkout disable (the others leave skip-worktree entries unwritten),
	// so the refusals above are Git's path check, not a skipped expansion.
	for _, sparse := range []bool{false, true} {
		r := newSparseRepo(t)
		hook := strings.TrimSpace(r.git("hash-object", "-w", "--stdin"))
		r.pointSubAt(chain(r, hook, "x", "hooks"))
		if !sparse {
			r.dropSparseSettings()
		}
		if out, err := r.run("sparse-checkout", "disable"); err != nil {
			t.Fatalf("git sparse-checkout disable of an ordinary sparse entry's tree: %v\n%s", err, out)
		}
		if _, err := os.Lstat(filepath.Join(r.dir, "sub/x/hooks/post-checkout")); err != nil {
			t.Errorf("the control's tree entry was not written (sparse settings %v): %v", sparse, err)
		}
	}
}
