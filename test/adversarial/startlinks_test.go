package adversarial

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

func init() { attacks = append(attacks, startLinksAttack) }

// startLinksAttack: what the host runs at the next login or shell, reached from HOME
// through a link into a kept dotfiles checkout (~/.zshrc and ~/.config/fish), and
// start-up files the lists missed: the systemd user manager's drop-in
// (DefaultEnvironment reaches every user service) and a desktop entry. After the
// audit the host's HOME is as it was, byte for byte.
var startLinksAttack = attack{
	name: "kept paths: start-up files reached through a link or missed by the lists are put back",
	setup: func(t *testing.T, x *target) []string {
		for _, d := range []string{"src/dotfiles/fish/conf.d", ".config/systemd/user.conf.d", ".local/share/applications"} {
			mkUserDir(t, filepath.Join(x.Home, d))
		}
		sandboxtest.WriteFile(t, filepath.Join(x.Home, "src/dotfiles/zshrc"), "# mine\n")
		for link, target := range map[string]string{".zshrc": "src/dotfiles/zshrc", ".config/fish": "../src/dotfiles/fish"} {
			if err := os.Symlink(target, filepath.Join(x.Home, link)); err != nil {
				t.Fatal(err)
			}
		}
		testenv.Chown(t, x.Home)
		return nil
	},
	args: []string{"--keep", "~/src/dotfiles", "--keep", "~/.config/systemd", "--keep", "~/.local/share/applications"},
	script: `
		attempt zshrc-link sh -c 'echo "touch $PWNED/zshrc" >> "$HOME/.zshrc"'
		attempt fish-link sh -c 'echo "touch $PWNED/fish" > "$HOME/.config/fish/conf.d/x.fish"'
		attempt systemd-user-conf sh -c 'printf "[Manager]\nDefaultEnvironment=LD_PRELOAD=%s/x.so\n" "$PWNED" > "$HOME/.config/systemd/user.conf.d/x.conf"'
		attempt desktop-entry sh -c 'printf "[Desktop Entry]\nType=Application\nExec=touch %s/desktop\nMimeType=text/plain;\n" "$PWNED" > "$HOME/.local/share/applications/x.desktop"'
		echo DONE`,
	check: func(t *testing.T, x *target, r sandboxtest.Result) {
		if n := strings.Count(r.Stderr, "put back as it was"); n < 4 {
			t.Errorf("%d findings put back, want one per plant (4):\n%s", n, r.Stderr)
		}
	},
}
