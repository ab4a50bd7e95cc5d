package adversarial

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestStartupFileNames runs startupNameAttacks on every runner and both doors: the
// rule is the policy's, which the Go API takes as the CLI does.
func TestStartupFileNames(t *testing.T) {
	runAttacksOn(t, append(sandboxtest.Backends(t), sandboxtest.NativeGo, sandboxtest.GoAPI), startupNameAttacks)
}

// startupNameAttacks: a start-up file with a second name, named with a "..", moved
// by $XDG_DATA_HOME, a named pipe, or a start-up directory with a link out. A read-only bind
// covers one name of an inode; through another name in the writable repository the
// session writes what the operator's next shell runs. ~/.bashrc hard-linked to the
// dotfiles checkout's bashrc is the real ~/.bashrc written from the repository (P3),
// and a file the launch makes read-only (~/.zshrc -> REPO/dots/zshrc) is written
// through its twin REPO/dots/alias. Both are refused with one line.
var startupNameAttacks = []attack{{
	name: "start-up files: ~/.bashrc hard-linked into the repository",
	setup: func(t *testing.T, x *target) []string {
		mkUserDir(t, filepath.Join(x.Repo, "dots"))
		sandboxtest.WriteFile(t, filepath.Join(x.Repo, "dots/bashrc"), "# mine\n")
		if err := os.Link(filepath.Join(x.Repo, "dots/bashrc"), filepath.Join(x.Home, ".bashrc")); err != nil {
			t.Fatal(err)
		}
		testenv.Chown(t, x.Repo)
		return []string{filepath.Join(x.Repo, "dots/bashrc")}
	},
	script: `
		attempt bashrc-twin sh -c 'echo "touch $PWNED/bashrc" >> "$REPO/dots/bashrc"'
		echo DONE`,
	refused: "which has 2 names (hard links) on the file system of the writable",
}, {
	name: "start-up files: a read-only start-up file's second name in the repository",
	setup: func(t *testing.T, x *target) []string {
		mkUserDir(t, filepath.Join(x.Repo, "dots"))
		sandboxtest.WriteFile(t, filepath.Join(x.Repo, "dots/zshrc"), "# mine\n")
		if err := os.Link(filepath.Join(x.Repo, "dots/zshrc"), filepath.Join(x.Repo, "dots/alias")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(x.Repo, "dots/zshrc"), filepath.Join(x.Home, ".zshrc")); err != nil {
			t.Fatal(err)
		}
		testenv.Chown(t, x.Repo)
		testenv.Chown(t, filepath.Join(x.Home, ".zshrc"))
		return []string{filepath.Join(x.Repo, "dots/zshrc")}
	},
	script: `
		attempt zshrc-twin sh -c 'echo "touch $PWNED/zshrc" >> "$REPO/dots/alias"'
		echo DONE`,
	refused: "which has 2 names (hard links): the session could write it through another name",
}, {
	// ~/.config/fish -> REPO/fish, read-only inside; its conf.d/a.fish a symlink to
	// REPO/shared/a.fish, which was not: fish runs what the session wrote there.
	name: "start-up files: a link out of a read-only start-up directory into the repository",
	setup: func(t *testing.T, x *target) []string {
		mkUserDir(t, filepath.Join(x.Repo, "fish/conf.d"))
		mkUserDir(t, filepath.Join(x.Repo, "shared"))
		mkUserDir(t, filepath.Join(x.Home, ".config"))
		sandboxtest.WriteFile(t, filepath.Join(x.Repo, "shared/a.fish"), "# mine\n")
		for link, target := range map[string]string{
			filepath.Join(x.Repo, "fish/conf.d/a.fish"): "../../shared/a.fish", filepath.Join(x.Home, ".config/fish"): filepath.Join(x.Repo, "fish"),
		} {
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
		}
		testenv.Chown(t, x.Repo)
		testenv.Chown(t, filepath.Join(x.Home, ".config"))
		return []string{filepath.Join(x.Repo, "shared/a.fish")}
	},
	script: `
		attempt fish-link-out sh -c 'echo "touch $PWNED/fish" >> "$REPO/shared/a.fish"'
		echo DONE`,
	refused: "a symlink that leads to",
}, {
	// ~/.bashrc -> REPO/dots/bashrc, a named pipe: nothing a shell runs now, and
	// passed over, but its name was the session's to replace with a script.
	name: "start-up files: a named pipe where ~/.bashrc leads in the repository",
	setup: func(t *testing.T, x *target) []string {
		mkUserDir(t, filepath.Join(x.Repo, "dots"))
		if err := syscall.Mkfifo(filepath.Join(x.Repo, "dots/bashrc"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(x.Repo, "dots/bashrc"), filepath.Join(x.Home, ".bashrc")); err != nil {
			t.Fatal(err)
		}
		testenv.Chown(t, x.Repo)
		testenv.Chown(t, filepath.Join(x.Home, ".bashrc"))
		return []string{filepath.Join(x.Repo, "dots/bashrc")}
	},
	script: `
		attempt bashrc-fifo sh -c 'rm -f "$REPO/dots/bashrc" && echo "touch $PWNED/bashrc" > "$REPO/dots/bashrc"'
		echo DONE`,
	refused: "which is a FIFO: the session could replace it",
}, {
	// A ".." after a symlink: $ZDOTDIR=$HOME/zl/.. with zl -> REPO/zdot/sub is
	// REPO/zdot to zsh (the kernel takes ".." after the link), and ~/.bashrc ->
	// $HOME/top/../.bashrc with top -> REPO/zsh is REPO/.bashrc. A lexical clean made
	// them $HOME and ~/.bashrc itself, and left both writable.
	name: "start-up files: a '..' after a symlink in $ZDOTDIR and in a link's target",
	setup: func(t *testing.T, x *target) []string {
		mkUserDir(t, filepath.Join(x.Repo, "zdot/sub"))
		mkUserDir(t, filepath.Join(x.Repo, "zsh"))
		sandboxtest.WriteFile(t, filepath.Join(x.Repo, "zdot/.zshrc"), "# mine\n")
		sandboxtest.WriteFile(t, filepath.Join(x.Repo, ".bashrc"), "# mine\n")
		for link, target := range map[string]string{
			"zl": filepath.Join(x.Repo, "zdot/sub"), "top": filepath.Join(x.Repo, "zsh"), ".bashrc": x.Home + "/top/../.bashrc", // not Join'd: it would Clean the ".." away
		} {
			if err := os.Symlink(target, filepath.Join(x.Home, link)); err != nil {
				t.Fatal(err)
			}
			testenv.Chown(t, filepath.Join(x.Home, link))
		}
		testenv.Chown(t, x.Repo)
		x.env = append(x.env, "ZDOTDIR="+filepath.Join(x.Home, "zl")+"/..")
		return []string{filepath.Join(x.Repo, "zdot/.zshrc"), filepath.Join(x.Repo, "zdot/.zlogin"), filepath.Join(x.Repo, ".bashrc")}
	},
	script: `
		try zdotdir-zshrc sh -c 'echo "touch $PWNED/zshrc" >> "$ZDOTDIR/.zshrc"'
		try zdotdir-zlogin sh -c 'echo "touch $PWNED/zlogin" > "$ZDOTDIR/.zlogin"'
		try bashrc-dotdot sh -c 'echo "touch $PWNED/bashrc" >> "$HOME/.bashrc"'
		echo DONE`,
}, {
	// $XDG_DATA_HOME in the repository: fish's vendor directories, bash-completion,
	// the user's systemd units and the desktop's applications are looked for there
	// instead of ~/.local/share, and nothing there was made read-only. ($XDG_CONFIG_HOME
	// there is refused already: agentbox's own config would be writable.)
	name: "start-up files: $XDG_DATA_HOME in the repository",
	setup: func(t *testing.T, x *target) []string {
		mkUserDir(t, filepath.Join(x.Repo, "xdg/share/applications"))
		mkUserDir(t, filepath.Join(x.Repo, "xdg/share/bash-completion/completions"))
		testenv.Chown(t, x.Repo)
		x.env = append(x.env, "XDG_DATA_HOME="+filepath.Join(x.Repo, "xdg/share"))
		return []string{filepath.Join(x.Repo, "xdg/share/applications/x.desktop"), filepath.Join(x.Repo, "xdg/share/bash-completion/completions/git"),
			filepath.Join(x.Repo, "xdg/share/systemd"), filepath.Join(x.Repo, "xdg/share/fish")}
	},
	script: `
		try xdg-data-applications sh -c 'printf "[Desktop Entry]\nExec=touch %s/desktop\n" "$PWNED" > "$XDG_DATA_HOME/applications/x.desktop"'
		try xdg-data-completion sh -c 'echo "touch $PWNED/completion" > "$XDG_DATA_HOME/bash-completion/completions/git"'
		try xdg-data-systemd mkdir -p "$XDG_DATA_HOME/systemd/user"
		try xdg-data-fish mkdir -p "$XDG_DATA_HOME/fish/vendor_conf.d"
		echo work > "$REPO/notes" && echo DONE`,
}}
