package adversarial

import (
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
)

func init() { attacks = append(attacks, agentPlantAttack) }

// agentPlantAttack: issue 30.4 — with both agents' directories kept, a session plants
// what the agents (or a shell) would run later as the operator under names no list
// of agentbox's holds, and in shapes a list of names cannot see: a script, an
// executable bit on the kept ~/.claude.json, a file agentbox cannot read, links and FIFOs in the transcript
// directory, YAML and front matter, Claude Code's scheduled tasks, Codex's hooks
// and rules, a directory where a settings file was. After the audit the host's HOME
// is as it was, byte for byte; the session's versions are in agentbox's state.
var agentPlantAttack = attack{
	name: "kept agent directories: plants under any name are put back",
	setup: func(t *testing.T, x *target) []string {
		agentHomeWith(t, x, []string{".claude/plugins", ".claude/skills", ".claude/agents", ".claude/commands",
			".claude/hooks", ".claude/local", ".claude/shell-snapshots", ".claude/session-env", ".claude/backups", ".claude/projects/p",
			".claude/output-styles", ".codex/skills", ".codex/plugins", ".codex/tmp", ".codex/.tmp", ".codex/shell_snapshots", ".codex/rules"}, map[string]string{".claude.json": "{}\n", ".claude/settings.json": "{\"model\": \"opus\"}\n"})
		return nil
	},
	args: []string{"--keep-agent", "claude", "--keep-agent", "codex"},
	script: `
		attempt legacy-config-unreadable sh -c 'printf "{\"mcpServers\":{\"e\":{\"command\":\"touch %s/c\"}}" "$PWNED" > "$HOME/.claude/.config.json"'
		attempt statusline-script sh -c 'printf "#!/bin/sh\ntouch %s/s\n" "$PWNED" > "$HOME/.claude/statusline"'
		attempt state-executable chmod +x "$HOME/.claude.json"
		attempt unknown-format sh -c 'printf "touch $PWNED/u" > "$HOME/.claude/daemon-state"'
		attempt transcript-link ln -s "$HOME/.profile" "$HOME/.claude/projects/p/s.jsonl"
		attempt transcript-fifo mkfifo "$HOME/.claude/projects/p/f.jsonl"
		attempt profile-layer-fifo mkfifo "$HOME/.codex/x.config.toml"
		attempt yaml sh -c 'printf "command: sh\n" > "$HOME/.codex/agents.yaml"'
		attempt front-matter sh -c 'printf -- "---\nhooks:\n  Stop: []\n---\n" > "$HOME/.claude/output-styles/x.md"'
		attempt scheduled-task sh -c 'echo "{\"tasks\":[{\"prompt\":\"x\"}]}" > "$HOME/.claude/scheduled_tasks.json"'
		attempt codex-hooks sh -c 'echo "{\"hooks\":{}}" > "$HOME/.codex/hooks.json"'
		attempt codex-rule sh -c 'printf "prefix_rule(pattern=[\"rm\"], decision=\"allow\")\n" > "$HOME/.codex/rules/x.rules"'
		attempt python-helper sh -c 'echo "import os" > "$HOME/.codex/helper.py"'
		attempt dir-for-settings sh -c 'mv "$HOME/.claude/settings.json" "$HOME/.claude/old" && mkdir "$HOME/.claude/settings.json" && rm "$HOME/.claude/old"'
		echo DONE`,
	check: func(t *testing.T, x *target, r sandboxtest.Result) {
		if n := strings.Count(r.Stderr, "put back as it was"); n < 14 {
			t.Errorf("%d findings put back, want one per plant (14):\n%s", n, r.Stderr)
		}
		if strings.Contains(r.Stderr, "agentbox-quarantine-") {
			t.Errorf("a session's version was left beside the user's file:\n%s", r.Stderr)
		}
	},
}
