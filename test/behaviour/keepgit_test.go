package behaviour

import (
	"os"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestKeepGitHostFiles: a kept path may not hold what the operator's Git reads in
// every repository wherever the environment and the global config put it — the
// global config under $XDG_CONFIG_HOME or GIT_CONFIG_GLOBAL, a file it includes, a
// ~/.gitconfig linked into a dotfiles directory, its core.hooksPath,
// init.templateDir and the program its core.pager names — on every backend: 125 and one line naming the file. A kept
// path holding none of them still launches.
func TestKeepGitHostFiles(t *testing.T) {
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			h := b.Home
			for _, d := range []string{"/xdg/git", "/dotfiles", "/inc", "/githooks", "/tmpl", "/gcg", "/plain"} {
				mkdirUser(t, h+d)
			}
			writeUser(t, h+"/xdg/git/config", "[user]\n\tname = t\n")
			writeUser(t, h+"/inc/extra.gitconfig", "[alias]\n\tco = checkout\n")
			writeUser(t, h+"/gcg/config", "[user]\n\tname = t\n")
			writeUser(t, h+"/dotfiles/gitconfig", "[include]\n\tpath = ~/inc/extra.gitconfig\n[core]\n\thooksPath = ~/githooks\n\tpager = ~/tools/pager -R\n[init]\n\ttemplateDir = ~/tmpl\n")
			mkdirUser(t, h+"/tools")
			if err := os.Symlink(h+"/dotfiles/gitconfig", h+"/.gitconfig"); err != nil {
				t.Fatal(err)
			}
			testenv.Chown(t, h+"/.gitconfig")
			cases := []struct {
				env  []string
				keep string
				file string
			}{
				{[]string{"XDG_CONFIG_HOME=" + h + "/xdg"}, "~/xdg/git", h + "/xdg/git"},
				{nil, "~/dotfiles", h + "/.gitconfig"},
				{nil, "~/inc", h + "/inc/extra.gitconfig"},
				{nil, "~/githooks", h + "/githooks"},
				{nil, "~/tmpl", h + "/tmpl"},
				{nil, "~/tools", h + "/tools/pager"},
				{[]string{"GIT_CONFIG_GLOBAL=" + h + "/gcg/config"}, "~/gcg", h + "/gcg/config"},
			}
			for _, c := range cases {
				cmd := b.Command(b.Repo, []string{"--no-record", "--no-git-save", "--keep", c.keep}, "echo RAN")
				cmd.Env = append(cmd.Env, c.env...)
				r := sandboxtest.Run(cmd)
				lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
				if r.Code != 125 || len(lines) != 1 || !strings.Contains(lines[0], c.file) || !strings.Contains(lines[0], "Git reads for every repository") || strings.Contains(r.Stdout, "RAN") {
					t.Errorf("--keep %s %v: want 125 and one line naming %s, got %s", c.keep, c.env, c.file, r)
				}
			}
			if out := b.OK("echo RAN", "--keep", "~/plain"); out != "RAN\n" {
				t.Errorf("--keep ~/plain: %q", out)
			}
		})
	}
}
