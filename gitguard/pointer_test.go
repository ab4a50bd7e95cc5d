package gitguard

import "testing"

// The cases are what Git's read_gitfile and get_common_dir accept: "gitdir: " with one
// space, trailing CR/LF dropped, spaces kept as part of the path.
func TestPointerParsing(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
		ok   bool
	}{
		{"gitdir: /a/b\n", "/a/b", true},
		{"gitdir: ../x\r\n", "../x", true},
		{"gitdir: /a b \n", "/a b ", true},
		{"gitdir:  /a\n", " /a", true},
		{"gitdir:/a\n", "", false},
		{"gitdir: \n", "", false},
		{"Gitdir: /a\n", "", false},
		{"", "", false},
	} {
		got, ok := ParseGitFile([]byte(c.in))
		if got != c.want || ok != c.ok {
			t.Errorf("ParseGitFile(%q) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.ok)
		}
	}
	for _, c := range []struct {
		in, want string
		ok       bool
	}{
		{"../..\n", "/r/.git", true},
		{"/common\r\n", "/common", true},
		{" /c \n", "/r/.git/worktrees/w/ /c ", true},
		{"\n", "", false},
	} {
		got, ok := ParseCommonDir("/r/.git/worktrees/w", []byte(c.in))
		if got != c.want || ok != c.ok {
			t.Errorf("ParseCommonDir(%q) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}
