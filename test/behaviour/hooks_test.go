package behaviour

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// docBlock is the fenced block of docs/agents.md whose info string is "LANG NAME".
func docBlock(t *testing.T, lang, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(), "docs", "agents.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```" + lang + " " + name + "\n(.*?)```").FindSubmatch(b)
	if m == nil {
		t.Fatalf("docs/agents.md has no ```%s %s block", lang, name)
	}
	return string(m[1])
}

// postToolUseCommand is the command of the first PostToolUse hook in a settings
// block, checking that its matcher (when it has one) takes want.
func postToolUseCommand(t *testing.T, block string, want ...string) string {
	t.Helper()
	var cfg struct {
		Hooks map[string][]struct {
			Matcher string `json:"matcher"`
			Hooks   []struct {
				Type    string `json:"type"`
				Command string `json:"command"`
			} `json:"hooks"`
		} `json:"hooks"`
	}
	if err := json.Unmarshal([]byte(block), &cfg); err != nil {
		t.Fatalf("hook settings in docs/agents.md: %v\n%s", err, block)
	}
	groups := cfg.Hooks["PostToolUse"]
	if len(groups) != 1 || len(groups[0].Hooks) != 1 || groups[0].Hooks[0].Type != "command" {
		t.Fatalf("want one PostToolUse command hook:\n%s", block)
	}
	if m := groups[0].Matcher; m != "" {
		for _, tool := range want {
			if !regexp.MustCompile("^(" + m + ")$").MatchString(tool) {
				t.Errorf("matcher %q does not take %s", m, tool)
			}
		}
	}
	return groups[0].Hooks[0].Command
}

// TestAgentHookCheckpoints: the hook entries docs/agents.md gives for Claude Code
// and Codex, run as each agent runs them (the command through sh -c, the event on
// stdin, or for Codex's notify as its last argument), inside a session with
// agentbox on PATH, each take a checkpoint named after the agent's step.
func TestAgentHookCheckpoints(t *testing.T) {
	claude := postToolUseCommand(t, docBlock(t, "json", "claude-code-settings"), "Edit", "Write", "MultiEdit", "Bash")
	codex := postToolUseCommand(t, docBlock(t, "json", "codex-hooks"))
	notify := regexp.MustCompile(`^notify = (\[.*\])\s*$`).FindStringSubmatch(docBlock(t, "toml", "codex-notify"))
	if notify == nil {
		t.Fatal("no notify = [...] line in the codex-notify block")
	}
	var notifyArgv []string
	if err := json.Unmarshal([]byte(notify[1]), &notifyArgv); err != nil || len(notifyArgv) == 0 {
		t.Fatalf("notify argv: %v", err)
	}
	// The events as the agents send them (Claude Code 2.1's PostToolUse, Codex
	// 0.171's, Codex's notify payload).
	claudeEvent := `{"session_id":"abc","transcript_path":"/x/t.jsonl","cwd":"REPO","permission_mode":"default","hook_event_name":"PostToolUse","tool_name":"Edit","tool_input":{"file_path":"REPO/src/main.go","old_string":"a","new_string":"b"},"tool_response":{"filePath":"REPO/src/main.go","success":true},"tool_use_id":"toolu_1"}`
	codexEvent := `{"session_id":"s","turn_id":"t","transcript_path":null,"cwd":"REPO","hook_event_name":"PostToolUse","model":"gpt-5","permission_mode":"default","tool_name":"shell","tool_use_id":"call_1","tool_input":{"command":["bash","-lc","make test"]},"tool_response":"ok"}`
	turn := `{"type":"agent-turn-complete","thread-id":"x","turn-id":"12345","cwd":"REPO","input-messages":["fix the build"],"last-assistant-message":"Fixed the build."}`
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			// A hook's checkpoint refused as too soon (the last one took longer to
			// record than usual: a loaded machine) is not an error, and the agent
			// would not send the event again; here the event is sent again, and
			// only the answer that is not a refusal is printed.
			script := `set -e
export PATH="$BINDIR:$PATH"
again() {
	while :; do
		rc=0; out=$("$@" 2>&1) || rc=$?
		case $out in *"too soon"*) sleep 0.1 ;; *) echo "$out" >&2; return $rc ;; esac
	done
}
mkdir -p src && echo one > src/main.go
again sh -c 'printf "%s" "$CLAUDE_EVENT" | sh -c "$CLAUDE_HOOK"'
echo two > src/main.go
again sh -c 'printf "%s" "$CODEX_EVENT" | sh -c "$CODEX_HOOK"'
echo three > src/main.go
again "$@" "$TURN"
`
			args := append([]string{"--", "/bin/sh", "-c", script, "sh"}, notifyArgv...)
			cmd := b.command(b.repo, args, "")
			cmd.Env = append(cmd.Env, "BINDIR="+filepath.Dir(b.bin),
				"CLAUDE_HOOK="+claude, "CLAUDE_EVENT="+strings.ReplaceAll(claudeEvent, "REPO", b.repo),
				"CODEX_HOOK="+codex, "CODEX_EVENT="+strings.ReplaceAll(codexEvent, "REPO", b.repo),
				"TURN="+strings.ReplaceAll(turn, "REPO", b.repo))
			r := run(cmd)
			if r.code != 0 || strings.Count(r.stderr, "agentbox: checkpoint: step ") != 3 {
				t.Fatalf("hooks in a session: %s", r)
			}
			log := run(b.fixture().Agentbox(b.repo, "log")).stdout
			for _, want := range []string{
				`(?m)^  @1 .* \+1 ~0 -0 +PostToolUse Edit ` + regexp.QuoteMeta(b.repo) + `/src/main.go$`,
				`(?m)^  @2 .* \+0 ~1 -0 +PostToolUse shell bash -lc make test$`,
				`(?m)^  @3 .* \+0 ~1 -0 +Codex turn: Fixed the build\.$`,
			} {
				if !regexp.MustCompile(want).MatchString(log) {
					t.Errorf("log lacks %s:\n%s", want, log)
				}
			}
		})
	}
}
