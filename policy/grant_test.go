package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckGrant: the Git directory rule on each shape of Git directory, for each
// kind of grant, and a component swapped for a symlink after resolution.
func TestCheckGrant(t *testing.T) {
	base, _ := filepath.EvalSymlinks(t.TempDir())
	mk := func(rel ...string) {
		for _, r := range rel {
			if err := os.MkdirAll(filepath.Join(base, r), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	touch := func(rel string) {
		if err := os.WriteFile(filepath.Join(base, rel), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mk("work/.git/hooks", "work/.git/modules/x", "bare.git/objects", "bare.git/refs", "bare.git/hooks",
		"wtgit/info", "plain/sub", "tree/.git", "Case/.GIT/hooks")
	touch("bare.git/HEAD")
	touch("wtgit/HEAD")
	touch("wtgit/commondir")
	// A work tree whose .git file names a gitdir inside it that has no shape yet.
	mk("named/meta/sub")
	if err := os.WriteFile(filepath.Join(base, "named/.git"), []byte("gitdir: meta\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "work/.git/hooks"), filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		rel  string
		kind GrantKind
		want string // "" allowed
	}{
		{"work/.git/hooks", GrantTree, "lies in a Git directory"},
		{"work/.git/modules/x", GrantTree, "lies in a Git directory"},
		{"work/.git", GrantTree, "is a Git directory"},
		{"work/.git", GrantGitDir, ""},
		{"work/.git/modules/x", GrantGitDir, "lies in a Git directory"},
		{"bare.git/hooks", GrantPlain, "lies in a Git directory"},
		{"bare.git", GrantTree, "is a Git directory"},
		{"wtgit/info", GrantTree, "HEAD beside commondir"},
		{"Case/.GIT/hooks", GrantTree, "lies in a Git directory"},
		{"link", GrantTree, "resolves to"},
		{"work/.git/hooks/new/dir", GrantTree, "lies in a Git directory"},
		{"plain/missing/.git/x", GrantTree, "lies in a Git directory"},
		{"named/meta", GrantPlain, "named by"},
		{"named/meta/sub", GrantTree, "named by"},
		{"plain/sub", GrantPlain, ""},
		{"tree", GrantTree, ""},
		{"tree", GrantPlain, "is a Git work tree"},
		{"plain", GrantGitDir, "is not a Git directory"},
	} {
		path := filepath.Join(base, c.rel)
		g, err := CheckGrant("--add-dir", path, path, c.kind)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.rel, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: want %q, got %v", c.rel, c.want, err)
		case err == nil && g.ID == (FileID{}):
			t.Errorf("%s: no identity", c.rel)
		}
	}
	// A component that became a symlink after the path was resolved fails the walk.
	if err := os.Rename(filepath.Join(base, "plain"), filepath.Join(base, "plain.old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "work/.git"), filepath.Join(base, "plain")); err != nil {
		t.Fatal(err)
	}
	if _, err := inspect(filepath.Join(base, "plain/sub")); err == nil || !strings.Contains(err.Error(), "became a symlink") {
		t.Errorf("swapped component: %v", err)
	}
}
