package behaviour

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestPlanMatchesDryRun: for the same repository and choices, the Go API's plan
// (sandbox.Plan, through the Go door) is the plan `agentbox exec --dry-run --json`
// prints: both doors prepare it in one place, with the same protections (pinned and
// protected Git paths, a linked worktree's metadata, masked sockets).
func TestPlanMatchesDryRun(t *testing.T) {
	b := newBox(t, sandboxtest.GoAPI)
	mod := filepath.Join(b.repo, ".git/modules/lib")
	for _, d := range []string{"hooks", "objects", "refs"} {
		if err := os.MkdirAll(filepath.Join(mod, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(mod, "HEAD"), "ref: refs/heads/main\n")
	writeFile(t, filepath.Join(mod, "config"), "[core]\n")
	testenv.Chown(t, b.repo)
	testenv.Git(t, b.home, b.repo, "add", "README")
	testenv.Git(t, b.home, b.repo, "commit", "-qm", "first")
	wt := filepath.Join(b.home, "wt")
	testenv.Git(t, b.home, b.repo, "worktree", "add", "-q", wt)
	for _, c := range []struct {
		dir  string
		args []string
	}{
		{b.repo, nil},
		{b.repo, []string{"--offline", "--disk-tmp"}},
		{wt, nil},
	} {
		args := append([]string{"--dry-run", "--json"}, c.args...)
		api := run(b.command(c.dir, args, "true"))
		cliBox := *b
		cliBox.backend = "native"
		cli := run(cliBox.command(c.dir, args, "true"))
		if api.code != 0 || cli.code != 0 {
			t.Fatalf("%s %v:\nGo API: %s\nCLI: %s", c.dir, c.args, api, cli)
		}
		if api.stdout != cli.stdout {
			t.Errorf("%s %v: sandbox.Plan differs from agentbox exec --dry-run --json:\nGo API: %s\nCLI:    %s", c.dir, c.args, api.stdout, cli.stdout)
		}
	}
}
