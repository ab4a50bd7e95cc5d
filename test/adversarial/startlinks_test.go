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
	name: "kept paths: start-up files reached through a link are read-only, those missed by the lists put back",
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
		// The two reached through a link from HOME are read-only inside (policy's
		// keptStartup): no write, nothing to put back. The other two are put back.
		if n := strings.Count(r.Stderr, "put back as it was"); n < 2 {
			t.Errorf("%d findings put back, want one per plant the session could make (2):\n%s", n, r.Stderr)
		}
		for _, want := range []string{"~/.zshrc leads into the writable", "~/.config/fish leads into the writable"} {
			if !strings.Contains(r.Stderr, want) {
				t.Errorf("the launch does not say %q:\n%s", want, r.Stderr)
			}
		}
	},
}
