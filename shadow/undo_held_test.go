package shadow

import (
	"fmt"
	"strings"
	"testing"
)

// TestTreeHoldsTakesNamesLiterally: the names undo asks its own record about are
// the sandbox's. Each is asked for as itself: a glob, pathspec magic, a leading
// dash, a newline, a name that is a directory in the tree and one that is absent
// say nothing about another path, whether named to Git or looked up in the
// tree's listing (many names).
func TestTreeHoldsTakesNamesLiterally(t *testing.T) {
	files := map[string]string{
		"a*":         "glob\n",
		"-n":         "dash\n",
		"new\nline":  "newline\n",
		"dir/inside": "inside\n",
		"abc":        "not asked\n",
		"other/x":    "not asked\n",
	}
	for i := range 2 * maxHeldPathspecs {
		files[fmt.Sprintf("many/%04d", i)] = "m\n"
	}
	repo := newRepo(t, files)
	s, _ := openStore(t, repo)
	record(t, s, Record{Command: []string{"true"}}, nil)
	tree := strings.TrimSpace(shadowGit(t, s, "rev-parse", onlySession(t, s).EndCommit+"^{tree}"))
	ask := []string{"a*", "ab", ":(glob)*", "-n", "new\nline", "new", "dir", "dir/inside", "dir/*", "absent"}
	for name := range files {
		if strings.HasPrefix(name, "many/") {
			ask = append(ask, name)
		}
	}
	few := ask[:10] // named to Git; the rest from the tree's listing
	for _, ask := range [][]string{few, ask} {
		held, err := s.treeHolds(tree, ask)
		if err != nil {
			t.Fatal(err)
		}
		asked := map[string]bool{}
		for _, p := range ask {
			asked[p] = true
			_, want := files[p]
			if held[p] != want {
				t.Errorf("treeHolds(%q) of %d = %v, want %v", p, len(ask), held[p], want)
			}
		}
		for p := range held {
			if !asked[p] {
				t.Errorf("treeHolds of %d holds %q, which it was not asked for", len(ask), p)
			}
		}
	}
}
