package agents

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestReadmeNodeRequirement: the README's Node versions are the pinned CLIs' own
// (package.json engines), so that a user is neither sent to upgrade for nothing
// nor left with a Node the CLI refuses (issue 35.14).
func TestReadmeNodeRequirement(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(readme)), " ")
	for _, c := range []struct{ pkg, claim string }{
		{"@anthropic-ai/claude-code", `Claude Code needs Node (\d+) or newer`},
		{"@openai/codex", "Codex \\(`@openai/codex`\\) Node (\\d+)"},
	} {
		data, err := os.ReadFile(filepath.Join(filepath.Dir(agentsBin), "lib/node_modules", c.pkg, "package.json"))
		if err != nil {
			testenv.Skip(t, "the pinned %s is missing: run scripts/setup-test-env.sh: %v", c.pkg, err)
		}
		var pkg struct {
			Engines struct{ Node string } `json:"engines"`
		}
		if err := json.Unmarshal(data, &pkg); err != nil {
			t.Fatal(err)
		}
		want := regexp.MustCompile(`^>=\s*(\d+)`).FindStringSubmatch(pkg.Engines.Node)
		got := regexp.MustCompile(c.claim).FindStringSubmatch(text)
		if want == nil || got == nil || got[1] != want[1] {
			t.Errorf("%s needs node %q; the README says %v (looked for %s)", c.pkg, pkg.Engines.Node, got, c.claim)
		}
	}
}

// TestReadmeNpmUserPrefix: the README's recipe for `npm install -g` as a user works:
// without it, the system's prefix refuses the user (EACCES); with `npm config set
// prefix ~/.local`, the command lands in ~/.local/bin and runs. The package is a
// local tarball: no registry is asked.
func TestReadmeNpmUserPrefix(t *testing.T) {
	npm, err := exec.LookPath("npm")
	if err != nil {
		testenv.Skip(t, "npm is not installed: %v", err)
	}
	home := testenv.Dir(t, "npmhome")
	pkg := filepath.Join(home, "probe")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile := func(p, s string, mode os.FileMode) {
		if err := os.WriteFile(p, []byte(s), mode); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(filepath.Join(pkg, "package.json"), `{"name":"agentbox-npm-probe","version":"1.0.0","bin":{"agentbox-npm-probe":"probe.js"}}`, 0o644)
	writeFile(filepath.Join(pkg, "probe.js"), "#!/usr/bin/env node\nconsole.log('probe ran')\n", 0o755)
	testenv.Chown(t, home)
	npmRun := func(args ...string) (string, error) {
		cmd := testenv.Command(t, home, npm, args...)
		cmd.Env = append(cmd.Env, "npm_config_cache="+filepath.Join(home, ".npm"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := npmRun("pack", "--pack-destination", home, pkg); err != nil {
		t.Fatalf("npm pack: %v\n%s", err, out)
	}
	tgz := filepath.Join(home, "agentbox-npm-probe-1.0.0.tgz")
	flags := []string{"--offline", "--no-audit", "--no-fund"}
	out, err := npmRun(append([]string{"install", "-g"}, append(flags, tgz)...)...)
	if err == nil || !strings.Contains(out, "EACCES") {
		t.Errorf("npm install -g as a user: want EACCES on the system's prefix, got %v:\n%s", err, out)
	}
	if out, err := npmRun("config", "set", "prefix", "~/.local"); err != nil {
		t.Fatalf("npm config set prefix ~/.local: %v\n%s", err, out)
	}
	if out, err := npmRun(append([]string{"install", "-g"}, append(flags, tgz)...)...); err != nil {
		t.Fatalf("npm install -g with the user prefix: %v\n%s", err, out)
	}
	run := testenv.Command(t, home, filepath.Join(home, ".local/bin/agentbox-npm-probe"))
	run.Env = append(run.Env, "PATH=/usr/local/bin:/usr/bin:/bin")
	if out, err := run.CombinedOutput(); err != nil || !strings.Contains(string(out), "probe ran") {
		t.Errorf("~/.local/bin/agentbox-npm-probe: %v\n%s", err, out)
	}
}
