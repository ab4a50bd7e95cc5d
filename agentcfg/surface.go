package agentcfg

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/agentbox/agentbox/internal/tomlbound"
)

// format is how a file is read for its exec surface. The first four values are
// stored in the ledger (agents/baseline.json): never renumber them.
type format int

const (
	// claudeSettings: JSON settings, as jsonDoc (kept apart only for ledgers
	// written before). claudeState: JSON the agent rewrites itself (stateFile),
	// read with the exec-shaped keys (execKey) at any depth.
	claudeSettings format = iota
	claudeState
	// codexConfig: TOML settings, as tomlDoc (kept apart for old ledgers).
	codexConfig
	// wholeFile: every byte is code (shell rc files, scripts, exec-policy rules),
	// and so is a file whose format agentbox cannot read (opaque).
	wholeFile
	// jsonDoc: any other JSON file: settings (settingsFormat), every key counts.
	jsonDoc
	// jsonLines: one JSON value per line; exec-shaped content in any line makes
	// the whole file count.
	jsonLines
	// textKeys: YAML: no parser here, so a word of the exec-shaped key names
	// anywhere in it makes the whole file count.
	textKeys
	// opaque: not a format the audit reads; any change is put back, as for
	// wholeFile (fail closed).
	opaque
	// tomlDoc: any other TOML file: settings, as jsonDoc.
	tomlDoc
	// markdown: instructions (Markdown, plain text), audited like textKeys in its
	// front matter (skills' and agents' hooks live there), and for a "!`command`"
	// in its body (a command Claude Code runs when it loads the file).
	markdown
	// claudeLogin, codexLogin: an agent's login file, audited as claudeState and
	// for the account it signs in as (login.go).
	claudeLogin
	codexLogin
	// outLink: a symlink in a plain kept path that leads out of it
	// (outlinks_linux.go); only its target is read.
	outLink
)

// known are files below HOME that are audited wherever a kept path holds them, even
// outside an agent's directory: shell start-up files (the whole file runs in the
// operator's next shell) and Claude Code's state files, which live in HOME itself.
var known = []struct {
	rel string
	f   format
}{
	{".claude.json", claudeState},
	// The same state, for Claude Code built against another sign-in service.
	{".claude-custom-oauth.json", claudeState}, {".claude-local-oauth.json", claudeState},
	{".claude-staging-oauth.json", claudeState},
	{".profile", wholeFile}, {".bashrc", wholeFile}, {".bash_profile", wholeFile},
	{".bash_login", wholeFile}, {".bash_logout", wholeFile}, {".bash_aliases", wholeFile},
	{".zshenv", wholeFile}, {".zprofile", wholeFile}, {".zshrc", wholeFile},
	{".zlogin", wholeFile}, {".zlogout", wholeFile}, {".kshrc", wholeFile}, {".mkshrc", wholeFile},
	{".config/fish/config.fish", wholeFile}, {".config/fish/fish_variables", wholeFile},
	{".tcshrc", wholeFile}, {".cshrc", wholeFile}, {".login", wholeFile}, {".logout", wholeFile},
	{".bash_completion", wholeFile}, {".inputrc", wholeFile},
	// What the desktop session and PAM read at login.
	{".xprofile", wholeFile}, {".xsessionrc", wholeFile}, {".xsession", wholeFile},
	{".xinitrc", wholeFile}, {".pam_environment", wholeFile},
	// sshd runs ~/.ssh/rc and admits the keys of authorized_keys; ssh runs the
	// ProxyCommand, LocalCommand and Match exec of its config.
	{".ssh/rc", wholeFile}, {".ssh/config", wholeFile}, {".ssh/authorized_keys", wholeFile},
	{".ssh/authorized_keys2", wholeFile}, {".ssh/environment", wholeFile},
	// The desktop's default applications: a handler named for a type or a URL
	// scheme (x-scheme-handler/https) runs on the operator's next click.
	{".config/mimeapps.list", wholeFile},
}

// zshFiles are the start-up files zsh reads from $ZDOTDIR (HOME when unset, where
// known holds them).
var zshFiles = [...]string{".zshenv", ".zprofile", ".zshrc", ".zlogin", ".zlogout"}

// zdotdirKey is the key of Options.AgentDirs for $ZDOTDIR, which moves zsh's
// start-up files as CLAUDE_CONFIG_DIR moves Claude Code's directory.
const zdotdirKey = "zsh"

// startDirs are directories below HOME whose every file runs or is read as
// start-up later, wherever a kept path holds them: the user's systemd units (started
// at the next login, by a timer or a path unit) and environment.d (every user
// service's environment), the desktop's autostart entries, fish's conf.d and its
// autoloaded functions (a function named git replaces the command), zsh's and
// bash-completion's directories. Audited whole, as the shell start-up files; they
// are walked as an agent's directory is.
//
// All of .config/systemd, not only its user/ units: the user manager reads
// user.conf and user.conf.d there (DefaultEnvironment=LD_PRELOAD=… reaches every
// user service). Desktop entries in .local/share/applications run their Exec= when
// the desktop or xdg-open picks them; fish autoloads completions/NAME.fish (and its
// vendor directories) as code; KDE's plasma-workspace/env scripts are sourced at
// login and its shutdown scripts run at logout.
var startDirs = []agentDir{
	{rel: ".config/systemd", allWhole: true}, {rel: ".local/share/systemd/user", allWhole: true},
	{rel: ".config/environment.d", allWhole: true}, {rel: ".config/autostart", allWhole: true},
	{rel: ".config/fish/conf.d", allWhole: true}, {rel: ".config/fish/functions", allWhole: true},
	{rel: ".config/fish/completions", allWhole: true},
	{rel: ".local/share/fish/vendor_conf.d", allWhole: true}, {rel: ".local/share/fish/vendor_functions.d", allWhole: true},
	{rel: ".local/share/fish/vendor_completions.d", allWhole: true},
	{rel: ".local/share/bash-completion/completions", allWhole: true},
	{rel: ".local/share/applications", allWhole: true},
	{rel: ".config/plasma-workspace/env", allWhole: true}, {rel: ".config/plasma-workspace/shutdown", allWhole: true},
}

// agentDir is an agent's own directory: inside a kept path, every file the session
// creates or changes in it is audited (walk_linux.go), except below data, which
// holds what the agent writes and reads back as data (transcripts, logs,
// databases): there only symlinks and special files are looked for. Below whole,
// every byte counts, whatever the format: what the agent runs or schedules as a
// whole (workflows, scheduled tasks, launch configurations, exec-policy rules).
type agentDir struct {
	agent  string
	rel    string // below HOME, where the agent looks by default
	env    string // the variable that moves it (Options.AgentDirs)
	data   []string
	whole  []string
	login  string // the file, relative to it, that holds the agent's login
	loginF format
	// allWhole: every file below it is audited whole (startDirs).
	allWhole bool
}

var agentDirs = []agentDir{
	{agent: "claude", rel: ".claude", env: "CLAUDE_CONFIG_DIR", data: []string{
		"projects", "history.jsonl", "todos", "statsig", "debug", "file-history",
		"paste-cache", "image-cache", "telemetry", "usage-data", "backups", "plans", ".last-cleanup",
		"logs", "traces", "cache", "downloads", "uploads", "tasks", "sessions",
		"startup-perf", "feedback", "feedback-bundles", "api-dumps", "dump-prompts",
	}, whole: []string{
		"workflows", "routines", "daemon", "daemon.json", "scheduled_tasks.json",
		"launch.json", "policy-limits.json",
		// The user's instructions, loaded into every session on every project
		// (memory, rules, the output style that replaces the system prompt, /loop's
		// prompt): a session's words there would steer the operator's next agent
		// anywhere.
		"CLAUDE.md", "rules", "output-styles", "loop.md",
		// Subagents and skills are picked by the agent itself from their
		// description ("use proactively for every task"), and their bodies become
		// its instructions; a command's body is the prompt the user's /NAME sends.
		"agents", "skills", "commands",
		// Subagents' user-scope memory (memory: user): its MEMORY.md goes into
		// that subagent's instructions on every project.
		"agent-memory",
		// The account-scope memory (memory/personal), recalled on every project.
		"memory",
	}, login: ".credentials.json", loginF: claudeLogin},
	{agent: "codex", rel: ".codex", env: "CODEX_HOME", data: []string{
		"sessions", "archived_sessions", "history.jsonl", "session_index.jsonl", "log", "*.sqlite",
		"*.sqlite-wal", "*.sqlite-shm", "*.sqlite-journal", "thread-writer-locks",
		"installation_id", ".sandbox_migration", "cache", "models_cache.json",
	}, whole: []string{"rules", "hooks.json", "AGENTS.md", "AGENTS.override.md", "prompts",
		// Its memories: memory_summary.md goes into every session's instructions
		// on every project, as AGENTS.md does; the rest is what it recalls from.
		"memories",
		// The user's skills (as Claude Code's, below); skills/.system is Codex's
		// own, which it writes at its start when it was updated: that stays
		// audited as Markdown, or every kept session would put Codex's copy back.
		"skills/[^.]*", "skills/[^.]*/*", "skills/[^.]*/*/*", "skills/[^.]*/*/*/*"},
		login: "auth.json", loginF: codexLogin},
}

// isData: rel (relative to the agent's directory) lies in one of its data paths.
func (a agentDir) isData(rel string) bool { return under(rel, a.data) }

// otherMemory: rel lies in Claude Code's auto memory of a project other than the
// session's repository (projects/SLUG/memory/…). It is in the data path projects/,
// but not data: Claude Code loads a project's MEMORY.md into every new session it
// starts there, as it loads the user's CLAUDE.md, so a session's words in another
// project's memory steer the operator's next agent on that project. Audited whole.
// The session's own project's memory is the agent's record of this work (the
// repository, whose CLAUDE.md the session writes anyway) and stays data.
func (a agentDir) otherMemory(rel, repo string) bool {
	if a.agent != "claude" {
		return false
	}
	parts := strings.SplitN(rel, "/", 4)
	return len(parts) >= 3 && parts[0] == "projects" && parts[2] == "memory" &&
		(repo == "" || parts[1] != claudeProjectSlug(repo))
}

// claudeProjectSlug is the name Claude Code gives a project's directory below
// projects/: its path with every UTF-16 code unit that is not an ASCII letter or
// digit replaced by '-'. A name past 200 of them Claude Code cuts and suffixes with
// a hash; "" then, which matches no directory (its memory is audited: fail closed).
func claudeProjectSlug(path string) string {
	var b strings.Builder
	for _, r := range path {
		switch {
		case r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		case r > 0xffff:
			b.WriteString("--") // a surrogate pair in JavaScript's string
		default:
			b.WriteByte('-')
		}
	}
	if b.Len() > 200 {
		return ""
	}
	return b.String()
}

// isWhole: rel lies in one of the paths audited whole.
func (a agentDir) isWhole(rel string) bool { return a.allWhole || under(rel, a.whole) }

func under(rel string, list []string) bool {
	for _, d := range list {
		if rel == d || strings.HasPrefix(rel, d+"/") {
			return true
		}
		if ok, _ := filepath.Match(d, rel); ok && strings.ContainsAny(d, "*?[") {
			return true
		}
	}
	return false
}

// formatOf says how a file in an agent's directory is read, from its name and its
// first bytes; mode's execute bits or a script's shape make it code.
func formatOf(name string, head []byte, mode uint32) format {
	if mode&0o111 != 0 || bytes.HasPrefix(head, []byte("#!")) || bytes.HasPrefix(head, []byte("\x7fELF")) {
		return wholeFile
	}
	switch ext := strings.ToLower(filepath.Ext(name)); ext {
	case ".json":
		if stateFile(name) {
			return claudeState
		}
		return jsonDoc
	case ".jsonl", ".ndjson":
		return jsonLines
	case ".toml":
		return tomlDoc
	case ".yaml", ".yml":
		return textKeys
	case ".md", ".markdown", ".txt":
		return markdown
	case ".rules", ".sh", ".bash", ".zsh", ".fish", ".ksh", ".py", ".js", ".mjs", ".cjs", ".ts",
		".mts", ".rb", ".pl", ".php", ".lua", ".ps1", ".bat", ".cmd", ".exe", ".so", ".node", ".wasm":
		return wholeFile
	}
	return opaque
}

// stateFile says whether name is a JSON file in an agent's directory that the
// agent rewrites itself as it runs — Claude Code's state under $CLAUDE_CONFIG_DIR
// and its legacy name, the logins that it and Codex refresh, the caches and timers
// Claude Code 2.1.332 lists among its own machine-written files, Codex's update
// check: read with the exec-shaped key list (execKey), as ~/.claude.json is, since
// their other keys are the agent's own bookkeeping and putting those back would
// undo it every session. Every other JSON or TOML file there is settings
// (settingsFormat). A switch, not a map, so that no start of agentbox builds it.
func stateFile(name string) bool {
	switch name {
	case ".claude.json", ".claude-custom-oauth.json", ".claude-local-oauth.json",
		".claude-staging-oauth.json", ".config.json", ".credentials.json",
		"mcp-needs-auth-cache.json", "gh-pr-status-cache.json", "stats-cache.json",
		"active-time.json", "server-sessions.json", ".last-update-result.json",
		"auth.json", "version.json":
		return true
	}
	return false
}

// settingsFormat: a file the agent reads as settings and does not write itself in
// a normal session. Every key in it counts, new, changed or removed, unless it is
// harmless: a list of the keys that widen would fail open for the next key an
// agent learns to read.
func settingsFormat(f format) bool {
	switch f {
	case claudeSettings, codexConfig, jsonDoc, tomlDoc:
		return true
	}
	return false
}

// harmlessName says whether n (compared as execName's are) is a settings key that
// changes how an agent looks or which model answers, never what runs, what it may
// touch, or where requests go; the ones the agents write themselves when the user
// picks a model or dismisses a notice. At the top level of a settings file, or in
// a Codex profile.
func harmlessName(n string) bool {
	switch n {
	case "$schema", "model", "theme", "language", "effortlevel",
		"alwaysthinkingenabled", "fastmode", "advisormodel",
		"spinnertipsenabled", "syntaxhighlightingdisabled",
		"modelreasoningeffort", "modelreasoningsummary", "modelverbosity",
		"hideagentreasoning", "showrawagentreasoning", "notice",
		"windowswslsetupacknowledged":
		return true
	}
	return false
}

func harmless(path []string) bool {
	n := len(path)
	return (n == 1 || n == 3 && normName(path[0]) == "profiles") && harmlessName(normName(path[n-1]))
}

// execName says whether n is one of the exec-shaped key names, compared lowercase
// with '_' and '-' removed: keys that name a program run later (hooks, commands,
// helpers, notify, status lines, MCP and LSP servers), load code (plugins,
// marketplaces), shape every command the agent starts (env, shell policy), send
// requests and keys elsewhere (providers, base URLs, telemetry), or widen what runs
// without asking (permissions, approvals, sandbox settings, trust, allowed tools,
// and the key that picks one of the user's own profiles of them).
func execName(n string) bool {
	switch n {
	case "hooks", "hook", "command", "commands", "cmd", "exec", "executable", "program",
		"shell", "interpreter", "statusline", "notify", "filesuggestion", "awsauthrefresh",
		"awscredentialexport", "gcpauthrefresh", "plugins", "enabledplugins", "extraknownmarketplaces",
		"marketplaces", "enableallprojectmcpservers", "enabledmcpjsonservers", "env",
		"environment", "shellenvironmentpolicy", "permissions", "sandbox", "sandboxmode",
		"sandboxworkspacewrite", "approvalpolicy", "disableallhooks", "allowmanagedhooksonly",
		"forceloginmethod", "allowedtools", "hastrustdialogaccepted", "trustlevel",
		"modelproviders", "modelprovider", "otel", "features", "zshpath", "jsreplnodepath",
		"profile",
		// Claude Code's state keys that widen what runs without asking, or where
		// requests go: skipping the bypass-mode warning, CLAUDE.md imports from outside
		// the project, approved API keys and the stored one, servers in .mcp.json turned
		// off, remote control, the browser tool on by default, session upload.
		"bypasspermissionsmodeaccepted", "skipdangerousmodepermissionprompt",
		"hasclaudemdexternalincludesapproved", "customapikeyresponses",
		"primaryapikey", "disabledmcpjsonservers", "remotecontrolatstartup",
		"claudeinchromedefaultenabled", "autouploadsessions",
		"additionaldirectories", "defaultmode", "disablebypasspermissionsmode",
		"forceloginorguuid", "processwrapper", "policyhelpers",
		"sshhostcommands", "sshconfigs", "downloadsmirrorurl",
		"modelcatalogurl", "forcelogingatewayurl", "autoupdateschannel",
		// In an agent's or a skill's front matter: its own permission mode, the tools
		// it may not use.
		"permissionmode", "disallowedtools":
		return true
	}
	return false
}

// execKey: a key whose value is exec-shaped (execName, any "…helper", "…baseurl",
// "…executable", "experimental…").
func execKey(k string) bool {
	n := normName(k)
	return execName(n) || strings.HasSuffix(n, "helper") || strings.HasSuffix(n, "baseurl") ||
		strings.HasSuffix(n, "executable") || strings.HasPrefix(n, "experimental")
}

// serversKey: a table of MCP servers, one entry per server.
func serversKey(k string) bool { return normName(k) == "mcpservers" }

// trustKeys are the per-project keys that record the user's answer to the agent's
// "trust this folder?" question: kept for the session's own repository.
func trustKey(k string) bool {
	n := normName(k)
	return n == "hastrustdialogaccepted" || n == "trustlevel"
}

func normName(k string) string {
	return strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(k))
}

// entry is one audited key of a file: its canonical value and whether that value
// names a program (an MCP server over HTTP without a header helper does not). A nil
// path is the whole file: it cannot be put back key by key.
type entry struct {
	path  []string
	value string
	exec  bool
	// own: under the session's own repository's entry in projects: Claude Code
	// moves such keys (disabledMcpjsonServers, allowedTools) from its state into
	// the repository's .claude/settings.local.json, where the project audit reports
	// them; removed from the state they are not a finding.
	own bool
}

// entries extracts the keys of data that count: the exec-shaped ones, and in a
// settings file every one but the harmless. ok is false when the file cannot
// be read as its format: then the whole file counts.
func entries(f format, data []byte, repo string) (map[string]entry, bool) {
	out := map[string]entry{}
	switch f {
	case claudeSettings, claudeState, jsonDoc, claudeLogin, codexLogin:
		if len(bytes.TrimSpace(data)) == 0 {
			return out, true
		}
		v, ok := decodeJSON(data)
		if !ok || !walkFits(v, len(data)) {
			return nil, false
		}
		walkDoc(v, nil, repo, settingsFormat(f), out)
		markOwn(out, repo)
		if f == claudeState {
			addAccount(v, out)
		}
		return out, true
	case codexConfig, tomlDoc:
		var doc map[string]any
		if decodeTOML(data, &doc) != nil || !walkFits(doc, len(data)) {
			return nil, false
		}
		walkDoc(doc, nil, repo, true, out)
		markOwn(out, repo)
		return out, true
	case jsonLines:
		for _, line := range bytes.Split(data, []byte("\n")) {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			v, ok := decodeJSON(line)
			if !ok {
				return nil, false
			}
			if hasExec(v) {
				out["content"] = entry{value: string(data), exec: true}
				break
			}
		}
		return out, true
	case textKeys:
		if hasExecWord(data) {
			out["content"] = entry{value: string(data), exec: true}
		}
		return out, true
	case markdown:
		if hasExecWord(frontMatter(data)) || bytes.Contains(data, []byte("!`")) {
			out["content"] = entry{value: string(data), exec: true}
		}
		return out, true
	case opaque:
		if len(data) > 0 {
			out["content"] = entry{value: string(data), exec: true}
		}
		return out, true
	}
	out["content"] = entry{value: string(data), exec: true}
	return out, true
}

// addAccount adds the ids of the account Claude Code's state names (oauthAccount:
// what it signs in as, written at a sign-in and by its profile fetch, which keeps
// them while the account stays): another account's there is a planted login's.
func addAccount(v any, out map[string]entry) {
	doc, _ := v.(map[string]any)
	acct, _ := doc["oauthAccount"].(map[string]any)
	for _, k := range []string{"accountUuid", "organizationUuid"} {
		if x, ok := acct[k]; ok {
			add(out, []string{"oauthAccount", k}, x, true)
		}
	}
}

// markOwn sets own on the entries below projects.REPO.
func markOwn(out map[string]entry, repo string) {
	for k, e := range out {
		if repo != "" && len(e.path) > 2 && e.path[0] == "projects" && filepath.Clean(e.path[1]) == repo {
			e.own = true
			out[k] = e
		}
	}
}

// decodeTOML decodes a TOML document the session may have written, once
// tomlbound says its shape costs the decoder no more than its size (nesting and
// dotted keys cost it quadratic time: a session's end audit never finished).
func decodeTOML(data []byte, v any) error {
	if err := tomlbound.Check(data); err != nil {
		return err
	}
	_, err := toml.Decode(string(data), v)
	return err
}

// decodeJSON reads exactly one JSON value, numbers kept as written.
func decodeJSON(data []byte) (any, bool) {
	var v any
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if d.Decode(&v) != nil || d.More() {
		return nil, false
	}
	return v, true
}

// walkDoc adds an entry for every exec-shaped key in v, at any depth; an array
// holding one counts whole under its key, a document that is not an object whole.
// With all (a settings file), every key that is not harmless counts: each scalar
// and array under its own path.
func walkDoc(v any, at []string, repo string, all bool, out map[string]entry) {
	m, ok := v.(map[string]any)
	if !ok {
		if all || hasExec(v) {
			out["content"] = entry{value: mustJSON(v), exec: true}
		}
		return
	}
	for k, sub := range m {
		p := append(append([]string(nil), at...), k)
		switch {
		case len(p) == 3 && p[0] == "projects" && trustKey(k) && repo != "" && filepath.Clean(p[1]) == repo:
			// Trusting the session's own repository is the user's answer to the
			// agent's question in the session: kept.
		case all && harmless(p):
		case serversKey(k):
			addServers(out, p, sub)
		case execKey(k):
			add(out, p, sub, true)
		default:
			switch x := sub.(type) {
			case map[string]any:
				walkDoc(x, p, repo, all, out)
			case []any, []map[string]any:
				if all || hasExec(x) {
					add(out, p, sub, true)
				}
			default:
				if all {
					add(out, p, sub, true)
				}
			}
		}
	}
}

// maxWalkDepth bounds the objects walkDoc descends into; the agents' files nest
// a few levels.
const maxWalkDepth = 64

// walkFits reports whether walkDoc's work on v, a document of size bytes, stays
// in proportion to it. Each key walkDoc visits costs its whole path (the keys
// above it, copied and joined into a name), so a wide object deep down or below
// a long key costs far more than its bytes: 4 MiB of JSON took 75 s and 8 GiB.
// A document that does not fit counts whole, as one that cannot be read.
func walkFits(v any, size int) bool {
	budget := 4*size + 1<<20
	return fits(v, 0, 0, &budget)
}

func fits(v any, depth, prefix int, budget *int) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return true
	}
	if depth >= maxWalkDepth {
		return false
	}
	for k, sub := range m {
		p := prefix + len(k) + 1
		if *budget -= p + 16*(depth+1); *budget < 0 || !fits(sub, depth+1, p, budget) {
			return false
		}
	}
	return true
}

// hasExec: v holds an exec-shaped key anywhere.
func hasExec(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		for k, sub := range x {
			if execKey(k) || serversKey(k) || hasExec(sub) {
				return true
			}
		}
	case []any:
		for _, y := range x {
			if hasExec(y) {
				return true
			}
		}
	case []map[string]any:
		for _, y := range x {
			if hasExec(y) {
				return true
			}
		}
	}
	return false
}

// frontMatter is the YAML between a leading "---" line and the closing one; nil
// when there is none. Parsers disagree on both lines, so each is taken on the side
// that reads more: the opening as leniently as any parser finds it (after a byte
// order mark and blank lines, with anything after the dashes), the closing as
// strictly as any wants it — a line of exactly three dashes (before a CR), since
// one agent's parser reads on past "--- " and another's past "---x: 1", and a
// key after such a line is in the front matter the agent loads.
func frontMatter(data []byte) []byte {
	data = bytes.TrimLeft(bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")), " \t\r\n")
	if !bytes.HasPrefix(data, []byte("---")) {
		return nil
	}
	i := bytes.IndexByte(data, '\n')
	if i < 0 {
		return nil
	}
	rest := data[i+1:]
	for at := 0; at < len(rest); {
		line, _, _ := bytes.Cut(rest[at:], []byte("\n"))
		if string(bytes.TrimSuffix(line, []byte("\r"))) == "---" {
			return rest[:at]
		}
		at += len(line) + 1
	}
	return rest
}

// hasExecWord: some word of text is an exec-shaped key name (no YAML parser: a
// description that says "command" counts too, the conservative side). A backslash
// counts too: in a double-quoted YAML scalar an escape ("\x68ooks", "\u0068ooks")
// or an escaped line break ("hoo\<newline>ks") spells a key without its word.
func hasExecWord(text []byte) bool {
	if bytes.IndexByte(text, '\\') >= 0 {
		return true
	}
	words := bytes.FieldsFunc(text, func(r rune) bool {
		return !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	})
	for _, w := range words {
		if execKey(string(w)) || serversKey(string(w)) {
			return true
		}
	}
	return false
}

// addServers adds one entry per MCP server; a server names a program when it is
// started by command (stdio) or has a header helper command.
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
		exec := s == nil || s["type"] != "http" && s["type"] != "sse" && s["url"] == nil
		for k := range s {
			exec = exec || execKey(k)
		}
		add(out, append(append([]string(nil), at...), name), sv, exec)
	}
}

func add(out map[string]entry, path []string, v any, exec bool) {
	out[keyName(path)] = entry{path: path, value: mustJSON(v), exec: exec}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "unencodable"
	}
	return string(b)
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
		if e.path == nil {
			continue
		}
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
