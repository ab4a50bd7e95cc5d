package gitguard

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/agentbox/agentbox/gitguard/gitconfig"
)

// hostEnv points the host config lookup at the fixture's HOME only.
func hostEnv(t *testing.T, f *fixture) {
	t.Setenv("HOME", f.Home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(f.Home, ".config"))
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	t.Setenv("GIT_CONFIG_GLOBAL", "")
	t.Setenv("GIT_CONFIG_SYSTEM", "")
}

func protectedSet(t *testing.T, repo string) map[string]Protected {
	t.Helper()
	ps, err := ProtectedPaths(repo)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]Protected{}
	for _, p := range ps {
		m[p.Path] = p
	}
	return m
}

func TestProtectedIncludes(t *testing.T) {
	f := newFixture(t)
	hostEnv(t, f)
	r := func(rel string) string { return filepath.Join(f.Repo, rel) }

	// Repository config: a relative include (against .git/), an includeIf, a nested
	// include relative to the included file, a missing file, a missing directory.
	f.Write("conf/a.inc", "[include]\n\tpath = b.inc\n", 0o644)
	f.Write("conf/b.inc", "[user]\n\tname = b\n", 0o644)
	f.Write("conf/real.inc", "", 0o644)
	if err := os.Symlink("real.inc", r("conf/link.inc")); err != nil {
		t.Fatal(err)
	}
	f.Git(f.Repo, "config", "--add", "include.path", "../conf/a.inc")
	f.Git(f.Repo, "config", "--add", "include.path", "../conf/link.inc")
	f.Git(f.Repo, "config", "--add", "include.path", "../conf/missing.inc")
	f.Git(f.Repo, "config", "--add", "include.path", "../newdir/sub/x.inc")
	f.Git(f.Repo, "config", "includeIf.gitdir:/nowhere/.path", r("conf/cond.inc"))
	f.Git(f.Repo, "config", "--add", "include.path", "/etc/hostname")

	// Global configs: ~/.gitconfig with a ~/ path, XDG config with an absolute one.
	if err := os.Symlink(f.Repo, filepath.Join(f.Home, "work")); err != nil {
		t.Fatal(err)
	}
	f.Write(filepath.Join(f.Home, ".gitconfig"), "[include]\n\tpath = ~/work/global.inc\n", 0o644)
	f.Write("global.inc", "", 0o644)
	f.Write(filepath.Join(f.Home, ".config/git/config"), "[includeIf \"onbranch:x\"]\n\tpath = "+r("xdg.inc")+"\n", 0o644)
	f.Write("xdg.inc", "", 0o644)

	got := protectedSet(t, f.Repo)
	want := map[string]Protected{
		r("conf/a.inc"):       {Path: r("conf/a.inc"), Exists: true},
		r("conf/b.inc"):       {Path: r("conf/b.inc"), Exists: true},
		r("conf/real.inc"):    {Path: r("conf/real.inc"), Exists: true},
		r("conf/missing.inc"): {Path: r("conf/missing.inc")},
		r("newdir"):           {Path: r("newdir"), Dir: true},
		r("conf/cond.inc"):    {Path: r("conf/cond.inc")},
		r("global.inc"):       {Path: r("global.inc"), Exists: true},
		r("xdg.inc"):          {Path: r("xdg.inc"), Exists: true},
	}
	for p, w := range want {
		if g, ok := got[p]; !ok || g != w {
			t.Errorf("%s: got %+v (present %v), want %+v", p, g, ok, w)
		}
	}
	for p := range got {
		if p == "/etc/hostname" || p == r("conf/link.inc") {
			t.Errorf("%s must not be protected", p)
		}
	}

	// The placeholders can be made, and leave the missing file and directory there.
	var ps []Protected
	for _, p := range got {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b Protected) int {
		if a.Path < b.Path {
			return -1
		}
		return 1
	})
	if err := EnsurePlaceholders(ps); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(r("newdir")); err != nil || !fi.IsDir() {
		t.Errorf("newdir placeholder: %v", err)
	}
	if fi, err := os.Stat(r("conf/missing.inc")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("missing.inc placeholder: %v", err)
	}
}

// TestProtectedIncludeDepth checks Git's bound of 10 nested includes.
func TestProtectedIncludeDepth(t *testing.T) {
	f := newFixture(t)
	hostEnv(t, f)
	for i := range 12 {
		f.Write(fmt.Sprintf("inc/%d", i), fmt.Sprintf("[include]\n\tpath = %d\n", i+1), 0o644)
	}
	f.Git(f.Repo, "config", "include.path", "../inc/0")
	got := protectedSet(t, f.Repo)
	for i := range 12 {
		_, ok := got[filepath.Join(f.Repo, "inc", fmt.Sprint(i))]
		if want := i < gitconfig.MaxIncludeDepth; ok != want {
			t.Errorf("inc/%d protected: %v, want %v", i, ok, want)
		}
	}
}

// TestProtectedIncludesWithoutGit checks that a directory without .git still gets the
// global config's include targets protected: Git reads them for every repository.
func TestProtectedIncludesWithoutGit(t *testing.T) {
	f := newFixture(t)
	hostEnv(t, f)
	dir := filepath.Join(f.Root, "plain")
	f.Write(filepath.Join(dir, "team.inc"), "", 0o644)
	f.Write(filepath.Join(f.Home, ".gitconfig"), "[include]\n\tpath = "+filepath.Join(dir, "team.inc")+"\n", 0o644)
	got := protectedSet(t, dir)
	if p, ok := got[filepath.Join(dir, "team.inc")]; !ok || !p.Exists {
		t.Errorf("team.inc not protected: %v", got)
	}
}
