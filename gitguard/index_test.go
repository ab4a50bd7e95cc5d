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
	} {
		if got := unsafeIndexPath([]byte(p)); got != want {
			t.Errorf("unsafeIndexPath(%q) = %v, want %v", p, got, want)
		}
	}
}
