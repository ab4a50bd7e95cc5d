package agentcfg

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkCovered: the list of audited files for a HOME with the usual start-up
// files, an agent's directory and ~/.config kept, as the baseline and the audit
// each take it (the cost of following start-up paths' links outside the kept
// paths is in it).
func BenchmarkCovered(b *testing.B) {
	home := b.TempDir()
	for _, rel := range []string{".bashrc", ".profile", ".zshrc", ".config/fish/config.fish", ".config/systemd/user/x.service",
		".claude/settings.json", ".claude/CLAUDE.md", ".config/git/config", ".local/share/applications/a.desktop"} {
		p := filepath.Join(home, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x\n"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	o := Options{Home: home, Kept: []string{filepath.Join(home, ".config"), filepath.Join(home, ".claude")}, Repo: auditRepo}
	r := o.relaxer()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		list, _, _, _ := o.covered(r)
		if len(list) == 0 {
			b.Fatal("nothing covered")
		}
	}
}
