package behaviour

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestFlagHints: errors that name what the user meant (issue 35.10), through the
// real binary as the test user: each stops with 125 and one line.
func TestFlagHints(t *testing.T) {
	b := newBox(t, "native")
	writeUserConfig(t, b, "[profiles.work]\noffline = true\n")
	rows := []struct {
		args []string
		want string
	}{
		{[]string{"exec", "--allow-net", "https://api.anthropic.com/v1/messages", "--", "true"}, "give a host name, not a URL: --allow-net api.anthropic.com"},
		{[]string{"exec", "--allow-net", "@claude,@npm", "--", "true"}, "repeat the flag (--allow-net @claude --allow-net @npm)"},
		{[]string{"exec", "--profile", "--", "true"}, "flag needs an argument: --profile (it would take -- as its value)"},
		{[]string{"exec", "--keep", ".claude", "--", "true"}, "did you mean ~/.claude?"},
		{[]string{"exec", "--", "true"}, "config.toml:1: profiles: no such table: did you mean [profile.work]?"},
		{[]string{"exec", b.home + "/nope", "--", "true"}, "exec: repository " + b.home + "/nope: no such directory"},
		{[]string{"exec", "--alow-net", "x", "--", "true"}, "unknown flag: --alow-net (did you mean --allow-net?)"},
		{[]string{"exce", "--", "true"}, `unknown command "exce": did you mean exec?`},
		{[]string{"log", "--sinse", "3d"}, "unknown flag: --sinse (did you mean --since?)"},
	}
	for _, r := range rows {
		if r.args[1] == "--" {
			writeUserConfig(t, b, "[profiles.work]\noffline = true\n")
		} else {
			writeUserConfig(t, b, "")
		}
		res := run(b.fixture().Agentbox(b.repo, r.args...))
		lines := strings.Split(strings.TrimSpace(res.stderr), "\n")
		if res.code != 125 || len(lines) != 1 || !strings.Contains(lines[0], r.want) {
			t.Errorf("agentbox %q: want 125 and one line with %q:\n%s", r.args, r.want, res)
		}
	}
	// Outside any Git repository the working directory is the writable one: said.
	dir := filepath.Join(b.home, "plain")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.Chown(t, dir)
	res := sandboxtest.Run(b.fixture().Command(dir, []string{"--no-record"}, "true"))
	want := "agentbox: no Git repository here: " + dir + " (the current directory) is the writable one; pass --repo DIR to choose another\n"
	if res.Code != 0 || !strings.Contains(res.Stderr, want) {
		t.Errorf("outside a Git repository, want %q:\n%s", want, res)
	}
	// A launch refused there stays one line: the note waits for the command.
	res = sandboxtest.Run(b.fixture().Command(dir, []string{"--no-record", "--git-save-keep", "-1"}, "true"))
	if lines := strings.Split(strings.TrimSpace(res.Stderr), "\n"); res.Code != 125 || len(lines) != 1 || !strings.Contains(lines[0], "--git-save-keep -1") {
		t.Errorf("a refused launch outside a Git repository, want 125 and one line:\n%s", res)
	}
	if res := sandboxtest.Run(b.fixture().Command(b.repo, []string{"--no-record"}, "true")); strings.Contains(res.Stderr, "no Git repository") {
		t.Errorf("in a Git repository:\n%s", res)
	}
}
