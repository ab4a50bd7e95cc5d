package adversarial

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestDeepDocumentsBounded (P13): host-side code decodes documents a session
// writes — the repository's .agentbox.toml at the next launch, the kept agents'
// TOML and JSON at the session's end. A document shaped for the decoder's worst
// case (inline tables nested 60,000 deep, a wide object 2,000 objects down) held
// the launch, or the end audit of the kept paths, for minutes to hours and took
// gigabytes; killed there, the next launch ran the same audit again, and a plant
// beside it stayed in the operator's agent config meanwhile. Each must end within
// the hang bound: the launch refused in one line, the kept file put back whole.
func TestDeepDocumentsBounded(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			codex := filepath.Join(b.Home, ".codex", "config.toml")
			claude := filepath.Join(b.Home, ".claude.json")
			mkUserDir(t, filepath.Dir(codex))
			sandboxtest.WriteFile(t, codex, "model = \"o3\"\n")
			sandboxtest.WriteFile(t, claude, "{}\n")
			testenv.Chown(t, filepath.Dir(codex))
			testenv.Chown(t, claude)

			// The kept files: a Codex notify program beside nesting that cost the
			// TOML decoder quadratic time, and Claude Code's state with 1.1 million
			// keys 2,000 objects down (under the 16 MiB bound), each of which the walk
			// named by its path.
			r := runCmdBounded(t, b.Command(b.Repo, []string{"--keep-agent", "codex", "--keep-agent", "claude"}, `
python3 - <<'EOF'
import os
h = os.environ["HOME"]
n = 250000
with open(h + "/.codex/config.toml", "w") as f:
    f.write('notify = ["touch", "/tmp/pwned"]\nx = ' + "{b=" * n + "1" + "}" * n + "\n")
d = 2000
with open(h + "/.claude.json", "w") as f:
    f.write('{"a":' * d + "{" + ",".join('"k%d":1' % i for i in range(1100000)) + "}" + "}" * d)
EOF`))
			if got := sandboxtest.ReadFileOr(codex); got != "model = \"o3\"\n" {
				t.Errorf("the kept Codex config is not put back: %.200q\n%s", got, r)
			}
			if got := sandboxtest.ReadFileOr(claude); got != "{}\n" {
				t.Errorf("the kept Claude Code state is not put back: %.200q\n%s", got, r)
			}

			// The repository's own file, read at the next launch.
			b.OK(`python3 -c 'n = 60000; open(".agentbox.toml", "w").write("x = " + "{b=" * n + "1" + "}" * n + "\n")'`)
			r = runCmdBounded(t, b.Command(b.Repo, nil, "true"))
			if r.Code != 125 || !strings.Contains(r.Stderr, ".agentbox.toml") || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 {
				t.Errorf("a launch under a deeply nested .agentbox.toml: want exit 125 and one line naming the file, got %s", r)
			}
			if err := os.Remove(filepath.Join(b.Repo, ".agentbox.toml")); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestHugeConfigAudited (P13): a session leaves a nested repository whose config
// holds a million aliases that run a shell command (16 MiB, the audit's bound for
// a config), and as many exec lines in its rebase todo list and remote-helper URLs
// in a remotes file. The end audit's scan was quadratic in them (100,000 took 24 s)
// and held the launcher for hours, and its finding was one line of tens of
// megabytes. The session must end within the hang bound, each plant moved aside,
// each line of stderr short.
func TestHugeConfigAudited(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			r := runCmdBounded(t, b.Command(b.Repo, nil, `set -e
mkdir sub && git -C sub init -q
mkdir -p sub/.git/rebase-merge sub/.git/remotes
python3 -c '
with open("sub/.git/config", "a") as f:
    f.write("[alias]\n" + "".join("x%d = !true\n" % i for i in range(1000000)))
with open("sub/.git/rebase-merge/git-rebase-todo", "w") as f:
    f.write("".join("exec true %d\n" % i for i in range(1000000)))
with open("sub/.git/remotes/r", "w") as f:
    f.write("".join("URL: x%d::y\n" % i for i in range(1000000)))'`))
			for _, plant := range []struct{ rel, text string }{
				{"sub/.git/config", "x1 = !true"},
				{"sub/.git/rebase-merge/git-rebase-todo", "exec true 1\n"},
				{"sub/.git/remotes/r", "URL: x1::y"},
			} {
				if strings.Contains(sandboxtest.ReadFileOr(filepath.Join(b.Repo, plant.rel)), plant.text) {
					t.Errorf("%s is still in the nested repository\n%.2000s", plant.rel, r)
				}
			}
			for _, l := range strings.Split(r.Stderr, "\n") {
				if len(l) > 8192 {
					t.Errorf("a line of %d bytes on stderr: %.300s", len(l), l)
				}
			}
		})
	}
}

// runCmdBounded runs cmd and fails the test when it does not end within
// hangBound (hostile_files_test.go).
func runCmdBounded(t *testing.T, cmd *exec.Cmd) sandboxtest.Result {
	t.Helper()
	res := make(chan sandboxtest.Result, 1)
	if err := sandboxtest.StartAndCollect(cmd, res); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-res:
		return r
	case <-time.After(hangBound):
		_ = cmd.Process.Kill()
		t.Fatalf("agentbox hung (killed after %s): %v", hangBound, cmd.Args)
	}
	return sandboxtest.Result{}
}
