package adversarial

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestGoAPIInitBinaryTheSessionCanWrite: the Go API executes Options.InitBinary by
// its path at every launch, before any mount protects anything, as the user. One
// inside the session's repository is a file the session can replace: the first
// session swaps in a script, and the next launch ran it on the host. Such an
// InitBinary (and a relative one, which exec would look up) is refused before
// anything runs, through sandbox.Run and through a Launcher.
func TestGoAPIInitBinaryTheSessionCanWrite(t *testing.T) {
	for _, door := range []string{"run", "launcher"} {
		t.Run(door, func(t *testing.T) {
			box := sandboxtest.NewBox(t, sandboxtest.GoAPI)
			outside := testenv.Dir(t, "outside")
			marker := filepath.Join(outside, "planted init ran")
			init := filepath.Join(box.Repo, "tools", "agentbox")
			if err := os.MkdirAll(filepath.Dir(init), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := copyFile(testenv.Binary(t), init, 0o755); err != nil {
				t.Fatal(err)
			}
			testenv.Chown(t, box.Repo)
			plant := fmt.Sprintf(`rm -f tools/agentbox && printf '#!/bin/sh\ntouch "%s"\n' > tools/agentbox && chmod 755 tools/agentbox`, marker)
			launch := func(script string, bin string) sandboxtest.Result {
				cmd := box.Command(box.Repo, []string{"--no-git-save", "--init-binary", bin}, script)
				if door == "launcher" {
					cmd.Env = append(cmd.Env, "AGENTBOX_GODOOR_LAUNCHER=1")
				}
				return sandboxtest.Run(cmd)
			}
			first := launch(plant, init)
			second := launch("true", init)
			if sandboxtest.Exists(marker) {
				t.Fatalf("the init the first session planted in its repository ran on the host at the next launch:\nfirst: %s\nsecond: %s", first, second)
			}
			for _, r := range []sandboxtest.Result{first, second} {
				if r.Code != 125 || !strings.Contains(r.Stderr, "InitBinary") || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 {
					t.Errorf("an InitBinary inside the repository was not refused in one line:\n%s", r)
				}
			}
			if r := launch("true", "tools/agentbox"); r.Code != 125 || !strings.Contains(r.Stderr, "InitBinary") {
				t.Errorf("a relative InitBinary was not refused:\n%s", r)
			}
		})
	}
}
