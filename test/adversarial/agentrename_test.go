package adversarial

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

func init() { attacks = append(attacks, agentRenameAttack) }

// agentRenameAttack: an agent's directory linked into a kept dotfiles checkout
// (~/.claude -> src/dotfiles/claude, --keep ~/src) has its plugins and hooks bound
// read-only inside; the session renamed the directory away with those binds under
// it and made a fresh one at its name, with a plugin's hooks and a hook script the
// next agent ran, which the audit skipped as read-only. The directories on the way
// are mount points now: the rename fails, and HOME is as it was, byte for byte.
var agentRenameAttack = attack{
	name: "kept paths: a linked agent directory is not renamed away from its read-only parts",
	setup: func(t *testing.T, x *target) []string {
		for _, d := range []string{"agents", "backups", "commands", "hooks", "local", "plugins", "session-env", "shell-snapshots", "skills"} {
			mkUserDir(t, filepath.Join(x.Home, "src/dotfiles/claude", d))
		}
		if err := os.Symlink("src/dotfiles/claude", filepath.Join(x.Home, ".claude")); err != nil {
			t.Fatal(err)
		}
		testenv.Chown(t, x.Home)
		return nil
	},
	args: []string{"--keep", "~/src"},
	script: `
		attempt rename-agent-dir sh -c 'mv "$HOME/src/dotfiles/claude" "$HOME/src/dotfiles/old" && mkdir -p "$HOME/src/dotfiles/claude/plugins/p/hooks" "$HOME/src/dotfiles/claude/hooks" && echo "touch $PWNED/hook" > "$HOME/src/dotfiles/claude/hooks/x.sh"'
		attempt rename-checkout sh -c 'mv "$HOME/src/dotfiles" "$HOME/src/old" && mkdir -p "$HOME/src/dotfiles/claude/hooks"'
		echo DONE`,
}
