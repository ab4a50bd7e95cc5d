package gitguard

import "testing"

// TestUnsafeIndexPath: the paths Git must not write from an index, and names that
// only look like them.
func TestUnsafeIndexPath(t *testing.T) {
	for p, want := range map[string]bool{
		"": true, "/etc/passwd": true, ".git": true, ".git/hooks/post-checkout": true, "a/.GIT/config": true,
		"a/.Git": true, "a/./b": true, "a/../b": true, "..": true, "a//b": true, "a/": true, ".": true,
		"a": false, "a/b.go": false, ".gitignore": false, ".github/workflows/x": false, "x.git": false,
		"..a": false, "...": false, "a/.gitx/b": false, ".gi": false, "a/.g1t/b": false,
		// What NTFS takes for .git (Git's is_ntfs_dotgit) and HFS+ (is_hfs_dotgit).
		".git ": true, ".git./hooks/x": true, ".GIT . /config": true, "git~1/hooks/x": true, "GIT~1": true,
		"a/Git~1 .": true, ".git::$INDEX_ALLOCATION/hooks/x": true, ".git\\hooks\\x": true,
		".g\u200cit/hooks/x": true, "\ufeff.GIT/config": true, ".git\u200d": true, "a/.\u206aG\u202eit": true,
		"git~2": false, "git~1x": false, ".git x": false, "git~": false, ".g\u00e9it": false, ".g\u200cix": false,
		".git\u200cx": false, "\u200c.gitx": false,
	} {
		if got := unsafeIndexPath([]byte(p)); got != want {
			t.Errorf("unsafeIndexPath(%q) = %v, want %v", p, got, want)
		}
	}
}
