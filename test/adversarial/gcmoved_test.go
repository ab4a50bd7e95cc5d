package adversarial

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestGCKeepsARepositoryMovedAway (P13): agentbox gc removed the records and the
// Git snapshots of every repository whose path was gone. A session of a repository
// around another one (or of an --add-dir that holds it) can move the inner one
// away, first emptying its .git if it likes: the next gc then deleted the inner
// repository's history of sessions and the snapshots that were the only copy of
// its .git. gc must keep them while they hold anything younger than
// --sessions-older-than, and the repository moved back must find them.
func TestGCKeepsARepositoryMovedAway(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			inner := filepath.Join(b.Repo, "inner")
			if err := os.Mkdir(inner, 0o755); err != nil {
				t.Fatal(err)
			}
			sandboxtest.WriteFile(t, filepath.Join(inner, "f"), "one\n")
			testenv.Chown(t, inner)
			testenv.Git(t, b.Home, inner, "init", "-q")
			if r := sandboxtest.Run(b.Command(inner, []string{"--repo", inner}, "echo two > f")); r.Code != 0 {
				t.Fatalf("inner session: %s", r)
			}
			stores := func() []string {
				var out []string
				for _, kind := range []string{"shadow", "snapshots"} {
					m, _ := filepath.Glob(filepath.Join(b.Home, ".local/state/agentbox", kind, "inner-*"))
					out = append(out, m...)
				}
				return out
			}
			if got := stores(); len(got) != 2 {
				t.Fatalf("the inner repository's stores: %v; want its shadow repository and its snapshots", got)
			}

			// The outer session moves the inner repository away.
			b.OK("mv inner .inner-moved")
			r := sandboxtest.Run(b.Agentbox(b.Home, "gc"))
			if r.Code != 0 || strings.Contains(r.Stdout, filepath.Join(b.Home, ".local/state")) {
				t.Errorf("agentbox gc named or removed the moved repository's stores: %s", r)
			}
			if got := stores(); len(got) != 2 {
				t.Fatalf("after gc the inner repository's stores are %v; want both kept\n%s", got, r)
			}
			if err := os.Rename(filepath.Join(b.Repo, ".inner-moved"), inner); err != nil {
				t.Fatal(err)
			}
			log := sandboxtest.Run(b.Agentbox(inner, "log"))
			if log.Code != 0 || len(strings.Split(strings.TrimSpace(log.Stdout), "\n")) < 2 {
				t.Errorf("agentbox log of the repository moved back: %s", log)
			}
		})
	}
}
