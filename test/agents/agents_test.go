// Package agents runs the real coding agents' CLIs, as scripts/setup-test-env.sh
// installs them from npm, inside agentbox on every backend as the unprivileged test
// user: each one starts, and each one's own nested sandbox works inside agentbox
// (issue 14 §2). Nothing here needs a network or an API key: only offline
// subcommands run.
package agents

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// agentsBin is where scripts/setup-test-env.sh installs the pinned CLIs.
const agentsBin = "/var/cache/agentbox-test/agents/bin"

// The versions scripts/setup-test-env.sh pins.
const (
	claudeVersion = "2.1.332 (Claude Code)"
	codexVersion  = "codex-cli 0.171.0"
	srtVersion    = "0.0.83"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}

// box is a sandboxtest fixture whose commands find the agents and, for the nested
// sandboxes that look bwrap up on PATH (srt), agentbox's built bubblewrap 0.12.0
// rather than none or bookworm's 0.8.0.
type box struct {
	*sandboxtest.Box
}

func newBox(t *testing.T, backend string) box {
	t.Helper()
	if _, err := os.Stat(filepath.Join(agentsBin, "claude")); err != nil {
		testenv.Skip(t, "the agents' CLIs are missing at %s: run scripts/setup-test-env.sh", agentsBin)
	}
	return box{sandboxtest.NewBox(t, backend)}
}

// run runs script in the sandbox with ARGS before it, in the repository.
func (b box) run(script string, args ...string) sandboxtest.Result {
	b.T.Helper()
	cmd := b.Command(b.Repo, args, script)
	path := agentsBin + ":" + filepath.Dir(sandboxtest.BuiltBwrap) + ":/usr/local/bin:/usr/bin:/bin"
	for i, e := range cmd.Env {
		if strings.HasPrefix(e, "PATH=") {
			cmd.Env[i] = "PATH=" + path
		}
	}
	// No telemetry, update checks or auto-updates: the tests are offline.
	cmd.Env = append(cmd.Env, "DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_TELEMETRY=1", "CODEX_DISABLE_UPDATE_CHECK=1")
	return sandboxtest.Run(cmd)
}

func (b box) ok(script string, args ...string) string {
	b.T.Helper()
	r := b.run(script, args...)
	if r.Code != 0 {
		b.T.Fatalf("%s\nscript: %s", r, script)
	}
	return r.Stdout
}

// TestVersions: each CLI starts inside agentbox and reports the pinned version.
func TestVersions(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			out := b.ok("claude --version; codex --version 2>/dev/null; srt --version")
			for _, want := range []string{claudeVersion, codexVersion, srtVersion} {
				if !strings.Contains(out, want+"\n") {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

// TestNestedSandboxes: srt's and Codex's own sandboxes run inside agentbox, and they
// are really in force there: the same write to the repository that succeeds in
// agentbox's sandbox (the repository is writable, P2) fails inside theirs, whose
// defaults allow no writes to it. srt builds on bubblewrap (0.12.0 on PATH), socat
// and ripgrep; Codex runs its own bundled bubblewrap. Both nest a user namespace
// inside agentbox's, with --nested-sandbox (on Linux 7.1+ Landlock's deny of host
// path sockets would refuse their mounts).
func TestNestedSandboxes(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			out := b.ok(`set -u
srt -c 'echo srt-ran'
srt -c 'echo x > ./srt-wrote' 2>&1 && echo srt-write-allowed
codex sandbox -- sh -c 'echo codex-ran' 2>/dev/null
codex sandbox -- sh -c 'echo x > ./codex-wrote' 2>&1 && echo codex-write-allowed
echo x > ./agentbox-wrote && echo agentbox-write-allowed`, "--nested-sandbox")
			for _, want := range []string{"srt-ran", "codex-ran", "agentbox-write-allowed"} {
				if !strings.Contains(out, want+"\n") {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			for _, bad := range []string{"srt-write-allowed", "codex-write-allowed"} {
				if strings.Contains(out, bad) {
					t.Errorf("the nested sandbox let a write through (%s):\n%s", bad, out)
				}
			}
			for _, f := range []string{"srt-wrote", "codex-wrote"} {
				if sandboxtest.Exists(filepath.Join(b.Repo, f)) {
					t.Errorf("%s reached the host's repository", f)
				}
			}
			if !sandboxtest.Exists(filepath.Join(b.Repo, "agentbox-wrote")) {
				t.Errorf("the repository write outside the nested sandboxes did not reach the host")
			}
		})
	}
}
