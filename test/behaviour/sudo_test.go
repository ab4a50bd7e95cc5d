package behaviour

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestSudoOnUsersRepo (issue 35): root launching agentbox on a repository the user
// owns is told at launch, in one line, why the command cannot write there and what
// to do (sudo); with the user's HOME kept (sudo -E) agentbox refuses with exit 125
// naming the state directory and its owner, and writes nothing into it.
func TestSudoOnUsersRepo(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root: runs agentbox as root")
	}
	u := testenv.TestUser(t)
	for _, backend := range cliRunners(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			rootHome := testenv.Dir(t, "roothome") // root's own, as sudo sets it
			if err := os.Lchown(rootHome, 0, 0); err != nil {
				t.Fatal(err)
			}
			cmd := b.Command(b.Repo, []string{"--no-record"}, `touch "$REPO/probe" 2>/dev/null || echo DENIED`)
			cmd.SysProcAttr = nil // stay root
			cmd.Env = append(cmd.Env, "HOME="+rootHome)
			r := sandboxtest.Run(cmd)
			want := "agentbox: running as root on " + b.Repo + ", owned by " + u.Name
			if r.Code != 0 || !strings.Contains(r.Stdout, "DENIED") || !strings.Contains(r.Stderr, want) || !strings.Contains(r.Stderr, "without sudo") {
				t.Errorf("sudo: want the launch to say %q, got %s", want, r)
			}

			state := filepath.Join(b.Home, ".local", "state", "agentbox")
			for _, args := range [][]string{{"exec", "--backend", "native", "--", "true"}, {"audit", "--fix"}} {
				cmd = b.Agentbox(b.Repo, args...) // HOME is the user's: sudo -E
				cmd.SysProcAttr = nil
				r = sandboxtest.Run(cmd)
				lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
				if r.Code != 125 || len(lines) != 1 || !strings.Contains(r.Stderr, state) || !strings.Contains(r.Stderr, "owned by "+u.Name) || !strings.Contains(r.Stderr, "without sudo") {
					t.Errorf("sudo -E %v: want 125 and one line naming %s and its owner, got %s", args, state, r)
				}
			}
			if sandboxtest.Exists(state) {
				t.Errorf("root created %s in the user's HOME", state)
			}
		})
	}
}
