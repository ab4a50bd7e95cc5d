package gitguard

import (
	"strings"
	"testing"
)

func TestPinnedDirs(t *testing.T) {
	prot := []Protected{
		{Path: "/r/.git/config"}, {Path: "/r/.git/hooks"},
		{Path: "/r/.git/modules/a/b/config"}, {Path: "/r/tools/git.inc"},
		{Path: "/c/worktrees/w/commondir"}, {Path: "/elsewhere/x"},
	}
	got := strings.Join(PinnedDirs([]string{"/r", "/c"}, prot), " ")
	want := "/c/worktrees /c/worktrees/w /r/.git /r/.git/modules /r/.git/modules/a /r/.git/modules/a/b /r/tools"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
