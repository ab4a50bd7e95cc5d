package shadow

import "testing"

// TestCheckRecordPath: a path from a record that could leave the repository or
// reach its Git metadata is refused, whatever its spelling.
func TestCheckRecordPath(t *testing.T) {
	for p, ok := range map[string]bool{
		"a": true, "a/b.txt": true, "..a": true, "a/.gitignore": true, ".github/x": true,
		"": false, "/etc/passwd": false, "../x": false, "a/../../x": false, "a/./b": false,
		"a//b": false, "a/": false, ".git/config": false, "sub/.git/hooks/x": false, ".GIT/config": false,
		"a\x00b": false, "..": false, ".": false,
	} {
		if err := checkRecordPath(p); (err == nil) != ok {
			t.Errorf("checkRecordPath(%q) = %v, want ok %v", p, err, ok)
		}
	}
}
