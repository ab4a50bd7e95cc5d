package agentcfg

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

// format is how a known file is read for its exec surface.
type format int

const (
	// claudeSettings: Claude Code's settings.json; the keys in settingsExec.
	claudeSettings format = iota
	// claudeState: ~/.claude.json; MCP servers (user and per project) and the
	// per-project keys in projectExec.
	claudeState
	// codexConfig: Codex's config.toml; the tables and keys in codexExec.
	codexConfig
	// wholeFile: every byte is code (shell rc files, hook lists, scripts).
	wholeFile
)

// known are the files below HOME whose contents name programs that run later as
// the operator; each is audited when it lies in a kept path.
var known = []struct {
	rel string
	f   format
}{
	{".claude/settings.json", claudeSettings},
	{".claude/settings.local.json", claudeSettings},
	{".claude.json", claudeState},
	{".codex/config.toml", codexConfig},
	{".codex/hooks.json", wholeFile},
	// Shell start-up files: the whole file runs in the operator's next shell.
	{".profile", wholeFile}, {".bashrc", wholeFile}, {".bash_profile", wholeFile},
	{".bash_login", wholeFile}, {".bash_logout", wholeFile}, {".bash_aliases", wholeFile},
	{".zshenv", wholeFile}, {".zprofile", wholeFile}, {".zshrc", wholeFile},
	{".zlogin", wholeFile}, {".zlogout", wholeFile}, {".kshrc", wholeFile}, {".mkshrc", wholeFile},
	{".config/fish/config.fish", wholeFile},
}

// knownGlobs are families of files audited like known ones, found by listing a
// directory at the baseline and again at the audit (a new one is audited as new):
// Codex's profile layers (codex -p NAME reads $CODEX_HOME/NAME.config.toml) and its
// exec-policy rules, which let commands run without approval.
var knownGlobs = []struct {
	dir, pattern string
	f            format
}{
	{".codex", "*.config.toml", codexConfig},
	{".codex/rules", "*.rules", wholeFile},
}

// settingsExec are Claude Code's settings keys that name a program it runs (hooks,
// the status line, credential and header helpers, file suggestion), load code or
// servers (plugins, marketplaces, project MCP servers), shape every command it
// starts (env), or widen what runs without asking (permissions, sandbox,
// disableAllHooks), from Claude Code's settings documentation.
var settingsExec = []string{
	"hooks", "statusLine", "apiKeyHelper", "awsAuthRefresh", "awsCredentialExport",
	"gcpAuthRefresh", "otelHeadersHelper", "fileSuggestion", "enabledPlugins",
	"extraKnownMarketplaces", "enableAllProjectMcpServers", "enabledMcpjsonServers",
	"env", "permissions", "sandbox", "disableAllHooks", "allowManagedHooksOnly",
	"forceLoginMethod", "mcpServers",
}

// projectExec are the per-project keys of ~/.claude.json that let a project's own
// files run programs, or approve tools, without asking.
var projectExec = []string{
	"mcpServers", "enabledMcpjsonServers", "enableAllProjectMcpServers",
	"hasTrustDialogAccepted", "allowedTools",
}

// codexExec are Codex's config.toml keys (top level and in profiles) that name a
// program (notify, hooks, MCP servers), shape the commands it runs
// (shell_environment_policy), send requests and keys elsewhere (model providers,
// base URLs), trust projects, or widen its own sandbox and approvals.
var codexExec = []string{
	"notify", "hooks", "mcp_servers", "model_providers", "model_provider",
	"shell_environment_policy", "profiles", "projects", "sandbox_mode",
	"approval_policy", "sandbox_workspace_write", "permissions", "features",
	"chatgpt_base_url", "openai_base_url", "otel",
}

// entry is one audited key of a file: its canonical value and whether that value
// names a program (an MCP server over HTTP without a header helper does not).
type entry struct {
	path  []string
	value string
	exec  bool
}

// entries extracts the audited keys of data. ok is false when the file cannot be
// read as its format: then the whole file counts.
func entries(f format, data []byte, repo string) (map[string]entry, bool) {
	out := map[string]entry{}
	switch f {
	case claudeSettings, claudeState:
		var doc map[string]any
		d := json.NewDecoder(bytes.NewReader(data))
		d.UseNumber()
		if len(bytes.TrimSpace(data)) == 0 {
			return out, true
		}
		if d.Decode(&doc) != nil || d.More() {
			return nil, false
		}
		if f == claudeSettings {
			for _, k := range settingsExec {
				if v, ok := doc[k]; ok {
					if k == "mcpServers" {
						addServers(out, []string{k}, v)
						continue
					}
					add(out, []string{k}, v, true)
				}
			}
			return out, true
		}
		addServers(out, []string{"mcpServers"}, doc["mcpServers"])
		projects, _ := doc["projects"].(map[string]any)
		for dir, pv := range projects {
			proj, _ := pv.(map[string]any)
			for _, k := range projectExec {
				v, ok := proj[k]
				if !ok {
					continue
				}
				switch {
				case k == "mcpServers":
					addServers(out, []string{"projects", dir, k}, v)
				case k == "hasTrustDialogAccepted" && filepath.Clean(dir) == repo && repo != "":
					// Trusting the session's own repository is the user's
					// answer to Claude Code's question in the session: kept.
				default:
					add(out, []string{"projects", dir, k}, v, true)
				}
			}
		}
		return out, true
	case codexConfig:
		var doc map[string]any
		if _, err := toml.Decode(string(data), &doc); err != nil {
			return nil, false
		}
		for k, v := range doc {
			if isCodexExec(k) {
				add(out, []string{k}, v, true)
			}
		}
		return out, true
	}
	add(out, []string{"content"}, string(data), true)
	return out, true
}

func isCodexExec(k string) bool {
	if strings.HasPrefix(k, "experimental_") {
		return true
	}
	for _, e := range codexExec {
		if e == k {
			return true
		}
	}
	return false
}

// addServers adds one entry per MCP server; a server names a program when it is
// started by command (stdio) or has a headersHelper command.
func addServers(out map[string]entry, at []string, v any) {
	servers, ok := v.(map[string]any)
	if !ok {
		if v != nil {
			add(out, at, v, true)
		}
		return
	}
	for name, sv := range servers {
		s, _ := sv.(map[string]any)
		exec := s == nil || s["command"] != nil || s["headersHelper"] != nil ||
			(s["type"] != "http" && s["type"] != "sse" && s["url"] == nil)
		add(out, append(append([]string(nil), at...), name), sv, exec)
	}
}

func add(out map[string]entry, path []string, v any, exec bool) {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte("unencodable")
	}
	out[keyName(path)] = entry{path: path, value: string(b), exec: exec}
}

// keyName is how a finding names a key: dotted, with odd parts quoted.
func keyName(path []string) string {
	parts := make([]string, len(path))
	for i, p := range path {
		if p == "" || strings.ContainsAny(p, ". \t\"'\\") {
			b, _ := json.Marshal(p)
			p = string(b)
		}
		parts[i] = p
	}
	return strings.Join(parts, ".")
}

// programPaths are the paths named as a program by the values in es, expanded
// against home: the first word of a command and every word that is a path. A
// script there runs with the key, so it is audited whole when a kept path holds it.
func programPaths(es map[string]entry, home string) []string {
	seen := map[string]bool{}
	for _, e := range es {
		var v any
		if json.Unmarshal([]byte(e.value), &v) != nil {
			continue
		}
		walkStrings(v, func(s string) {
			for _, w := range strings.Fields(s) {
				w = strings.Trim(w, `"'`)
				for _, pre := range []string{"~/", "$HOME/", "${HOME}/"} {
					if strings.HasPrefix(w, pre) {
						w = filepath.Join(home, w[len(pre):])
					}
				}
				if filepath.IsAbs(w) {
					seen[filepath.Clean(w)] = true
				}
			}
		})
	}
	var list []string
	for p := range seen {
		list = append(list, p)
	}
	sort.Strings(list)
	return list
}

func walkStrings(v any, f func(string)) {
	switch x := v.(type) {
	case string:
		f(x)
	case []any:
		for _, y := range x {
			walkStrings(y, f)
		}
	case map[string]any:
		for _, y := range x {
			walkStrings(y, f)
		}
	}
}
