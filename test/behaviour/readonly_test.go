package behaviour

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestReadOnly: --read-only (issue 16) on every backend — the repository is readable
// and Git reads it, every write to it fails, and the launch leaves nothing in or
// beside it: no placeholder, no snapshot, no pending audit; HOME stays a disposable
// overlay, and a kept path stays writable.
func TestReadOnly(t *testing.T) {
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			testenv.Git(t, b.Home, b.Repo, "add", "README")
			testenv.Git(t, b.Home, b.Repo, "commit", "-q", "-m", "one")
			if err := removeHooks(b.Repo); err != nil {
				t.Fatal(err)
			}
			mkdirUser(t, b.Home+"/.config/tool")
			// A default launch adds to the snapshot store, so that the count below
			// can show one more.
			store := b.Home + "/.local/state/agentbox/snapshots"
			b.OK("true")
			saved := countFiles(t, store)
			if saved == 0 {
				t.Fatalf("a default launch left nothing in %s: the no-snapshot check would prove nothing", store)
			}
			before := snapshotTree(t, b.Repo)
			out := b.OK(`cat README; git log --format=%s; touch new 2>/dev/null && echo repo-writable
echo x >> README 2>/dev/null && echo readme-writable; git commit -q --allow-empty -m two 2>/dev/null && echo committed
touch ~/in-home && echo home-ok; touch ~/.config/tool/kept && echo kept-ok`, "--read-only", "--keep", "~/.config/tool")
			if !strings.HasPrefix(out, "hello\none\n") || strings.Contains(out, "writable") || strings.Contains(out, "committed") ||
				!strings.Contains(out, "home-ok") || !strings.Contains(out, "kept-ok") {
				t.Errorf("inside:\n%s", out)
			}
			if after := snapshotTree(t, b.Repo); after != before {
				t.Errorf("the repository changed:\nbefore %s\nafter  %s", before, after)
			}
			if n := countFiles(t, store); n != saved {
				t.Errorf("a snapshot was made: %d files in the store, %d before", n, saved)
			}
			if sandboxtest.Exists(b.Home + "/in-home") {
				t.Errorf("a HOME write reached the host")
			}
			if !sandboxtest.Exists(b.Home + "/.config/tool/kept") {
				t.Errorf("the kept path's write did not reach the host")
			}
			if m, _ := filepath.Glob(b.Home + "/.local/state/agentbox/audit-pending/*"); len(m) != 0 {
				t.Errorf("pending audits left: %v", m)
			}
		})
	}
}

// TestReadOnlyBelowTmp: a --read-only repository below /tmp, where the sandbox has
// its own empty /tmp, still appears at its path, read-only, on every backend (the
// native backend once failed there for want of a mount point, and blamed user
// namespaces).
func TestReadOnlyBelowTmp(t *testing.T) {
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			repo, err := os.MkdirTemp("/tmp", "agentbox-ro-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(repo) })
			testenv.Chown(t, repo)
			testenv.Git(t, b.Home, repo, "init", "-q")
			if err := os.WriteFile(repo+"/README", []byte("hello\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			testenv.Chown(t, repo+"/README")
			r := sandboxtest.Run(b.Command(repo, []string{"--read-only"}, `cat README; touch new 2>/dev/null && echo repo-writable; ls /tmp`))
			if r.Code != 0 || !strings.HasPrefix(r.Stdout, "hello\n") || strings.Contains(r.Stdout, "writable") {
				t.Errorf("inside:\n%s", r)
			}
			if sandboxtest.Exists(repo + "/new") {
				t.Errorf("a write reached the repository")
			}
		})
	}
}

// countFiles counts the regular files below dir (0 when it does not exist).
func countFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir && os.IsNotExist(err) {
				return filepath.SkipDir
			}
			return err
		}
		if d.Type().IsRegular() {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// removeHooks removes .git/hooks, so that a placeholder would show.
func removeHooks(repo string) error { return os.RemoveAll(filepath.Join(repo, ".git", "hooks")) }

// snapshotTree lists every entry below dir with its type, size and mtime.
func snapshotTree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %v %d %d\n", p, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
