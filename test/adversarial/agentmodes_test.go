package adversarial

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
)

func init() { attacks = append(attacks, agentSharedWriteAttack) }

// agentSharedWriteAttack: a session leaves the operator's kept agent state open to
// other local users — a settings file and a directory made world-writable — so that
// one of them can plant a hook or a login between sessions, where no audit looks.
// The file's mode is put back and the directory loses others' write.
var agentSharedWriteAttack = attack{
	name: "kept agent directories: state made writable by others is closed again",
	setup: func(t *testing.T, x *target) []string {
		mkUserDir(t, filepath.Join(x.Home, ".claude/output-styles"))
		agentHome(t, x, map[string]string{
			".claude/settings.json":      "{\n  \"model\": \"opus\"\n}\n",
			".claude/output-styles/x.md": "be brief\n",
			".claude.json":               "{}\n",
		})
		return nil
	},
	args: []string{"--keep-agent", "claude"},
	script: `
		attempt file-mode chmod 666 "$HOME/.claude/settings.json"
		attempt dir-mode chmod 777 "$HOME/.claude/output-styles"
		echo DONE`,
	check: func(t *testing.T, x *target, r sandboxtest.Result) {
		settings := filepath.Join(x.Home, ".claude/settings.json")
		styles := filepath.Join(x.Home, ".claude/output-styles")
		for _, want := range []string{settings + ": made writable by others", styles + ": writable by others (mode 0777)"} {
			if !strings.Contains(r.Stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, r.Stderr)
			}
		}
		for p, want := range map[string]os.FileMode{settings: 0o644, styles: 0o755} {
			if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
				t.Errorf("%s after the session: %v %v, want %v", p, fi.Mode().Perm(), err, want)
			}
		}
	},
}
