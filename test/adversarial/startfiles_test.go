package adversarial

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

func init() { attacks = append(attacks, startFilesAttack) }

// startFilesAttack: plain kept paths that hold what the host runs at the next login,
// ssh or shell, beyond the shell start-up files: a systemd user unit enabled by its
// link, an autostart entry, fish's conf.d and an autoloaded function, ssh's
// ProxyCommand, rc and authorized_keys, readline's Enter rebound. After the audit the
// host's HOME is as it was, byte for byte.
var startFilesAttack = attack{
	name: "kept paths: what runs at the next login or ssh is put back",
	setup: func(t *testing.T, x *target) []string {
		for _, d := range []string{".ssh", ".config/systemd/user/default.target.wants", ".config/autostart",
			".config/fish/functions", ".config/fish/conf.d"} {
			mkUserDir(t, filepath.Join(x.Home, d))
		}
		for rel, content := range map[string]string{".ssh/config": "Host work\n\tUser me\n", ".inputrc": "set bell-style none\n"} {
			sandboxtest.WriteFile(t, filepath.Join(x.Home, rel), content)
		}
		testenv.Chown(t, x.Home)
		return nil
	},
	args: []string{"--keep", "~/.ssh", "--keep", "~/.config/systemd", "--keep", "~/.config/autostart",
		"--keep", "~/.config/fish", "--keep", "~/.inputrc"},
	script: `
		attempt systemd-unit sh -c 'printf "[Service]\nExecStart=/bin/touch %s/unit\n[Install]\nWantedBy=default.target\n" "$PWNED" > "$HOME/.config/systemd/user/x.service" &&
			ln -s ../x.service "$HOME/.config/systemd/user/default.target.wants/x.service"'
		attempt autostart sh -c 'printf "[Desktop Entry]\nType=Application\nExec=touch %s/autostart\n" "$PWNED" > "$HOME/.config/autostart/x.desktop"'
		attempt fish-confd sh -c 'echo "touch $PWNED/fish" > "$HOME/.config/fish/conf.d/x.fish"'
		attempt fish-function sh -c 'echo "function git; touch $PWNED/fishgit; end" > "$HOME/.config/fish/functions/git.fish"'
		attempt ssh-proxycommand sh -c 'printf "Host *\n\tProxyCommand touch %s/ssh\n" "$PWNED" >> "$HOME/.ssh/config"'
		attempt ssh-rc sh -c 'echo "touch $PWNED/sshrc" > "$HOME/.ssh/rc"'
		attempt ssh-authorized-keys sh -c 'echo "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEvil attacker" > "$HOME/.ssh/authorized_keys"'
		attempt inputrc sh -c 'printf "\"\\\\C-m\": \"touch %s/inputrc\\\\n\"\n" "$PWNED" >> "$HOME/.inputrc"'
		echo DONE`,
	check: func(t *testing.T, x *target, r sandboxtest.Result) {
		if n := strings.Count(r.Stderr, "put back as it was"); n < 8 {
			t.Errorf("%d findings put back, want one per plant (8):\n%s", n, r.Stderr)
		}
	},
}
