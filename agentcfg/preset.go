// Package agentcfg knows the coding agents' own state below HOME: which paths each
// agent needs kept (writable through the HOME overlay, --keep-agent), and which of
// the files in them name a program that the agent — or a shell — runs later as the
// operator, outside the sandbox. Those are audited after every session the way Git
// config is (gitguard): a baseline before, a comparison after, and whatever is new
// is put back as it was, with the session's version moved aside and reported.
//
// The presets and the table of audited files are data, read by policy (what is kept)
// and by the session's audit (what is checked); nothing here mounts anything.
package agentcfg

import "sort"

// Path is one path a preset keeps, relative to HOME.
type Path struct {
	Rel string // e.g. ".claude"
	Dir bool   // a directory; else a regular file
	// Init is the content a missing file is created with before the launch, so
	// that there is something to bind; a missing directory is created empty.
	Init string
}

// Preset is what --keep-agent NAME keeps, and nothing more.
type Preset struct {
	Name string
	Keep []Path
	// ReadOnly are directories inside the kept ones whose files the agent runs or
	// loads as code later (plugins, skills …): bound read-only on top, created
	// empty when missing, as Git's hooks directory is (P7).
	ReadOnly []string
	// Private are directories inside the kept ones where the agent keeps what a
	// running copy of it executes or sources (helper links on its PATH, shell
	// snapshots): a fresh tmpfs inside, so that the sandbox can neither plant into
	// the operator's running agent outside nor lose the agent its scratch space.
	Private []string
}

var presets = []Preset{
	{
		Name: "claude",
		Keep: []Path{
			{Rel: ".claude", Dir: true},         // settings, transcripts (projects/), todos, backups, credentials
			{Rel: ".claude.json", Init: "{}\n"}, // state: trust, MCP servers, onboarding, user ID
		},
		// Plugins bring hooks and MCP servers, skills and agents may carry hooks
		// in their front matter, commands may run shell lines: all run later as
		// the operator. hooks/ is where hook scripts conventionally live.
		ReadOnly: []string{".claude/plugins", ".claude/skills", ".claude/agents", ".claude/commands", ".claude/hooks", ".claude/local"},
		// Claude Code sources its shell snapshot before every Bash command, and
		// keeps each session's environment scripts in session-env/; a session
		// outside uses its own from here. backups/ holds copies of .claude.json
		// that Claude Code tells the operator to restore when that file is
		// missing or broken: a planted one would be state with MCP servers.
		Private: []string{".claude/shell-snapshots", ".claude/session-env", ".claude/backups"},
	},
	{
		Name: "codex",
		Keep: []Path{
			{Rel: ".codex", Dir: true}, // config.toml, auth.json, sessions/, history
		},
		// Skills and plugins ship scripts and hooks the agent runs; Codex installs
		// its own system skills there when it can, and does without them when it
		// cannot.
		ReadOnly: []string{".codex/skills", ".codex/plugins"},
		// Codex puts links to its helpers (apply_patch …) on its commands' PATH
		// from tmp/arg0/, sources a shell snapshot from shell_snapshots/ before its
		// commands, and clones plugin marketplaces into .tmp/; a codex running
		// outside uses its own from here.
		Private: []string{".codex/tmp", ".codex/shell_snapshots", ".codex/.tmp"},
	},
}

// Lookup returns the preset called name.
func Lookup(name string) (Preset, bool) {
	for _, p := range presets {
		if p.Name == name {
			return p, true
		}
	}
	return Preset{}, false
}

// Names lists the presets, sorted.
func Names() []string {
	var n []string
	for _, p := range presets {
		n = append(n, p.Name)
	}
	sort.Strings(n)
	return n
}
