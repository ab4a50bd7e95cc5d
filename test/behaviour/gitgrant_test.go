package behaviour

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestGrantInGitDir (issue 30, class 5): no writable grant — the repository,
// --add-dir, --keep, --disk-tmp's directory, --git-save-dir — may be or lie in a Git
// directory of another repository: one named .git, a bare repository, a gitdir a .git
// file names, or a symlink to any of them. Each is refused before launch with exit
// 125 and one line, on every runner, and the Git directory stays as it was.
func TestGrantInGitDir(t *testing.T) {
	for _, backend := range cliRunners(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			h := b.Home
			other := testenv.Dir(t, "other")
			testenv.Git(t, h, other, "init", "-q")
			for _, d := range []string{".git/modules/x", ".git/info"} {
				if err := os.MkdirAll(filepath.Join(other, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			testenv.Git(t, h, h, "init", "-q", "--bare", h+"/bare.git")
			// A work tree whose .git file names a gitdir elsewhere, below HOME.
			if err := os.Mkdir(h+"/gitdirs", 0o755); err != nil {
				t.Fatal(err)
			}
			testenv.Chown(t, h+"/gitdirs")
			testenv.Git(t, h, h, "init", "-q", "--separate-git-dir", h+"/gitdirs/sep", h+"/sep")
			// A work tree whose .git file names a gitdir that has no Git shape yet.
			if err := os.MkdirAll(h+"/named/meta", 0o755); err != nil {
				t.Fatal(err)
			}
			sandboxtest.WriteFile(t, h+"/named/.git", "gitdir: meta\n")
			link := filepath.Join(h, "hooks-link")
			if err := os.Symlink(other+"/.git/hooks", link); err != nil {
				t.Fatal(err)
			}
			testenv.Chown(t, h)
			testenv.Chown(t, other)
			xdgInGit := "XDG_CACHE_HOME=" + other + "/.git/info/cache"
			for _, c := range []struct {
				dir  string
				args []string
				env  string
			}{
				{b.Repo, []string{"--add-dir", other + "/.git/hooks"}, ""},
				{b.Repo, []string{"--add-dir", other + "/.git/modules/x"}, ""},
				{b.Repo, []string{"--add-dir", other + "/.git/info"}, ""},
				{b.Repo, []string{"--add-dir", h + "/bare.git/hooks"}, ""},
				{b.Repo, []string{"--add-dir", h + "/gitdirs/sep/hooks"}, ""},
				{b.Repo, []string{"--add-dir", link}, ""},
				{b.Repo, []string{"--keep", h + "/bare.git/hooks"}, ""},
				{b.Repo, []string{"--keep", h + "/gitdirs/sep/info"}, ""},
				{b.Repo, []string{"--keep", h + "/named/meta"}, ""},
				{b.Repo, []string{"--add-dir", h + "/named/meta"}, ""},
				{b.Repo, []string{"--repo", other + "/.git/hooks"}, ""},
				{b.Repo, []string{"--repo", h + "/bare.git"}, ""},
				{h + "/bare.git", nil, ""}, // agentbox started inside a bare repository
				{b.Repo, []string{"--repo", link}, ""},
				{b.Repo, []string{"--disk-tmp"}, xdgInGit},
				{b.Repo, []string{"--git-save-dir", other + "/.git/info/snapshots"}, ""},
			} {
				cmd := b.Command(c.dir, append([]string{"--no-record"}, c.args...), `touch "$PWD/planted"; echo RAN`)
				if c.env != "" {
					cmd.Env = append(cmd.Env, c.env)
				}
				r := sandboxtest.Run(cmd)
				lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
				if r.Code != 125 || len(lines) != 1 || !strings.Contains(r.Stderr, "Git directory") || strings.Contains(r.Stdout, "RAN") {
					t.Errorf("%s %v %s: want 125 and one line naming the Git directory, got %s", c.dir, c.args, c.env, r)
				}
			}
			for _, d := range []string{other + "/.git/hooks", other + "/.git/info", h + "/bare.git/hooks", h + "/gitdirs/sep/hooks"} {
				if sandboxtest.Exists(d + "/planted") {
					t.Errorf("the sandbox wrote into %s", d)
				}
			}
			if sandboxtest.Exists(other+"/.git/info/snapshots") || sandboxtest.Exists(other+"/.git/info/cache") {
				t.Errorf("agentbox created a directory inside %s/.git", other)
			}
			// What stays allowed: a work tree as --add-dir (its .git protected) and the
			// separate-gitdir work tree as the repository.
			r := sandboxtest.Run(b.Command(h+"/sep", []string{"--no-record", "--add-dir", other}, `echo RAN`))
			if r.Code != 0 || !strings.Contains(r.Stdout, "RAN") {
				t.Errorf("a work tree with a separate gitdir, another work tree added: %s", r)
			}
		})
	}
}
