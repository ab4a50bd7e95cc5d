package behaviour

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestStartupFilesInRepository: the repository is a dotfiles checkout (~/.bashrc,
// ~/.config/fish and $ZDOTDIR lead into it) and an --add-dir holds ~/.claude (the
// repository, through the Go API, which has no --add-dir). On
// every runner the session can neither change, replace nor rename away what the
// operator's next shell or agent runs, while the rest of the repository stays
// writable, and the launch says which file is read-only and why. Where a read-only
// bind cannot protect it (a missing file at the repository's top, a link inside
// the repository on the way), the launch is refused with 125 and one line.
func TestStartupFilesInRepository(t *testing.T) {
	for _, backend := range runners(t) {
		t.Run(backend, func(t *testing.T) {
			t.Run("read-only inside, the rest writable", func(t *testing.T) { startupReadOnly(t, sandboxtest.NewBox(t, backend)) })
			t.Run("refused where a bind cannot protect it", func(t *testing.T) { startupRefused(t, sandboxtest.NewBox(t, backend)) })
			if backend != sandboxtest.GoAPI { // the Go API keeps no path
				t.Run("read-only in a kept path", func(t *testing.T) { startupKept(t, sandboxtest.NewBox(t, backend)) })
			}
		})
	}
}

func startupReadOnly(t *testing.T, b *sandboxtest.Box) {
	r, h := b.Repo, b.Home
	mkdirUser(t, filepath.Join(r, "shell"))
	writeUser(t, filepath.Join(r, "shell/bashrc"), "echo host bashrc\n")
	mkdirUser(t, filepath.Join(r, "fish/conf.d"))
	writeUser(t, filepath.Join(r, "fish/config.fish"), "echo host fish\n")
	mkdirUser(t, filepath.Join(r, "zsh"))
	writeUser(t, filepath.Join(r, "zsh/.zshrc"), "echo host zsh\n")
	// Start-up files no list names: found by the links where programs look.
	mkdirUser(t, filepath.Join(r, "nvim"))
	writeUser(t, filepath.Join(r, "nvim/init.lua"), "-- host\n")
	mkdirUser(t, filepath.Join(r, "bin"))
	writeUser(t, filepath.Join(r, "bin/tool"), "#!/bin/sh\n")
	// A link where programs look when $XDG_CONFIG_HOME is set.
	mkdirUser(t, filepath.Join(r, "helix"))
	writeUser(t, filepath.Join(r, "helix/config.toml"), "# host\n")
	// The Go API has no --add-dir: there the agent's directory is in the repository.
	added, args := r, []string{"--no-record"}
	if b.Backend != sandboxtest.GoAPI {
		added = testenv.Dir(t, "added")
		args = append(args, "--add-dir", added)
	}
	mkdirUser(t, filepath.Join(added, "claude"))
	writeUser(t, filepath.Join(added, "claude/settings.json"), "{}\n")
	testenv.Chown(t, added)
	mkdirUser(t, filepath.Join(h, ".config"))
	mkdirUser(t, filepath.Join(h, ".local"))
	mkdirUser(t, filepath.Join(h, ".local/bin"))
	mkdirUser(t, filepath.Join(h, "xdg"))
	for link, target := range map[string]string{
		".bashrc": "repo/shell/bashrc", ".config/fish": "../repo/fish", ".claude": filepath.Join(added, "claude"),
		".config/someapp": "../repo/nvim", ".local/bin/tool": "../../repo/bin/tool",
		"xdg/helix": "../repo/helix",
	} {
		if err := os.Symlink(target, filepath.Join(h, link)); err != nil {
			t.Fatal(err)
		}
		testenv.Chown(t, filepath.Join(h, link))
	}
	cmd := b.Command(r, args, `
		for try in 'echo evil >> shell/bashrc' 'rm -f shell/bashrc' 'mv shell/bashrc moved' 'mv shell shell2' 'mv fish fish2' 'echo evil > fish/conf.d/evil.fish' \
			'echo evil >> fish/config.fish' 'echo evil >> zsh/.zshrc' 'echo evil > zsh/.zlogin' 'mv zsh zsh2' \
			'echo evil >> nvim/init.lua' 'mv nvim nvim2' 'echo evil >> bin/tool' 'rm -f bin/tool' \
			'echo evil >> helix/config.toml' 'rm -f helix/config.toml' 'mv helix helix2' \
			"echo '{\"hooks\":1}' > $ADDED/claude/settings.json" "mv $ADDED/claude $ADDED/c2" "echo x > $ADDED/claude/new"; do
			if sh -c "$try" 2>/dev/null; then echo "WROTE: $try"; fi
		done
		echo work > notes && echo w > shell/other && mkdir -p sub && echo w > sub/f && rm notes && echo w > "$ADDED/other" && echo DONE`)
	cmd.Env = append(cmd.Env, "ZDOTDIR="+filepath.Join(r, "zsh"), "ADDED="+added, "XDG_CONFIG_HOME="+filepath.Join(h, "xdg"))
	res := sandboxtest.Run(cmd)
	if res.Code != 0 || !strings.Contains(res.Stdout, "DONE") {
		t.Fatalf("session: %s", res)
	}
	if strings.Contains(res.Stdout, "WROTE") {
		t.Errorf("the session changed a start-up file in the repository:\n%s", res.Stdout)
	}
	for path, want := range map[string]string{
		filepath.Join(r, "shell/bashrc"): "echo host bashrc\n", filepath.Join(r, "shell/other"): "w\n", filepath.Join(r, "fish/config.fish"): "echo host fish\n",
		filepath.Join(r, "zsh/.zshrc"): "echo host zsh\n", filepath.Join(added, "claude/settings.json"): "{}\n",
		filepath.Join(r, "sub/f"): "w\n", filepath.Join(added, "other"): "w\n",
		filepath.Join(r, "nvim/init.lua"): "-- host\n", filepath.Join(r, "bin/tool"): "#!/bin/sh\n",
		filepath.Join(r, "helix/config.toml"): "# host\n",
	} {
		if got := readFileOr(path); got != want {
			t.Errorf("%s on the host: %q, want %q", path, got, want)
		}
	}
	// (mv bashrc moved copies it across the mount point and then fails to unlink
	// it: a copy at another name is no start-up file.)
	for _, p := range []string{"fish/conf.d/evil.fish", "zsh/.zlogin", "shell2", "fish2", "zsh2", "nvim2", "helix2"} {
		if exists(filepath.Join(r, p)) {
			t.Errorf("%s was created on the host", p)
		}
	}
	for _, want := range []string{"agentbox: ~/.bashrc leads into the writable", "bashrc is read-only inside", "edit it outside the session", "$ZDOTDIR/", "~/.claude leads into the writable",
		"~/.config/someapp leads into the writable", "~/.local/bin/tool leads into the writable", "$XDG_CONFIG_HOME/helix leads into the writable"} {
		if !strings.Contains(res.Stderr, want) {
			t.Errorf("the launch does not say %q:\n%s", want, res.Stderr)
		}
	}
}

// startupKept: a start-up file that ~/.zshrc leads to in a plain kept path cannot
// be written inside at all (the kept-path audit would put it back after the
// session, but a shell opened meanwhile would run it); the rest of the kept path
// stays writable.
func startupKept(t *testing.T, b *sandboxtest.Box) {
	h := b.Home
	mkdirUser(t, filepath.Join(h, "dots"))
	writeUser(t, filepath.Join(h, "dots/zshrc"), "echo host zsh\n")
	if err := os.Symlink("dots/zshrc", filepath.Join(h, ".zshrc")); err != nil {
		t.Fatal(err)
	}
	testenv.Chown(t, filepath.Join(h, ".zshrc"))
	cmd := b.Command(b.Repo, []string{"--no-record", "--keep", filepath.Join(h, "dots")}, `
		for try in 'echo evil >> "$HOME/dots/zshrc"' 'rm -f "$HOME/dots/zshrc"' 'echo evil >> "$HOME/.zshrc"'; do
			if sh -c "$try" 2>/dev/null; then echo "WROTE: $try"; fi
		done
		echo w > "$HOME/dots/other" && echo DONE`)
	res := sandboxtest.Run(cmd)
	if res.Code != 0 || !strings.Contains(res.Stdout, "DONE") {
		t.Fatalf("session: %s", res)
	}
	if strings.Contains(res.Stdout, "WROTE") {
		t.Errorf("the session wrote a start-up file in the kept path:\n%s", res.Stdout)
	}
	if got := readFileOr(filepath.Join(h, "dots/zshrc")); got != "echo host zsh\n" {
		t.Errorf("dots/zshrc on the host: %q", got)
	}
	if got := readFileOr(filepath.Join(h, "dots/other")); got != "w\n" {
		t.Errorf("dots/other on the host: %q, want the kept path writable", got)
	}
	if !strings.Contains(res.Stderr, "~/.zshrc leads into the writable") {
		t.Errorf("the launch does not name ~/.zshrc:\n%s", res.Stderr)
	}
}

func startupRefused(t *testing.T, b *sandboxtest.Box) {
	r, h := b.Repo, b.Home
	writeUser(t, filepath.Join(r, "real-zshrc"), "echo host\n")
	for _, c := range []struct {
		link, target, want string
	}{
		{".zshrc", "repo/zshrc", "does not exist in the writable"},
		{".zshrc", "repo/zlink", "leads through the symlink"},
	} {
		os.Remove(filepath.Join(r, "zlink"))
		if c.target == "repo/zlink" {
			if err := os.Symlink("real-zshrc", filepath.Join(r, "zlink")); err != nil {
				t.Fatal(err)
			}
		}
		os.Remove(filepath.Join(h, c.link))
		if err := os.Symlink(c.target, filepath.Join(h, c.link)); err != nil {
			t.Fatal(err)
		}
		testenv.Chown(t, filepath.Join(h, c.link))
		res := b.Sh("echo RAN", "--no-record")
		if res.Code != 125 || strings.Contains(res.Stdout, "RAN") || strings.Count(strings.TrimSpace(res.Stderr), "\n") != 0 || !strings.Contains(res.Stderr, c.want) || !strings.Contains(res.Stderr, "~/.zshrc") {
			t.Errorf("~/%s -> %s: %s, want 125 and one line saying %q", c.link, c.target, res, c.want)
		}
	}
}
