package behaviour

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// cliCommands are the subcommands whose help, completions and manual are checked.
var cliCommands = []string{"exec", "audit", "undo", "checkpoint", "restore", "log", "show", "diff", "doctor", "bench", "gc", "completion", "man", "version"}

// helpFlags returns the flags a command's --help lists, as typed ("--repo").
func helpFlags(t *testing.T, b *sandboxtest.Box, cmd string) []string {
	t.Helper()
	r := sandboxtest.Run(b.Agentbox(b.Repo, cmd, "--help"))
	if r.Code != 0 {
		t.Fatalf("%s --help: %s", cmd, r)
	}
	if strings.Contains(r.Stdout, "\n  -") && regexp.MustCompile(`(?m)^\s+-[a-z][a-z-]+`).MatchString(r.Stdout) {
		t.Errorf("%s --help lists a Go-style -flag:\n%s", cmd, r.Stdout)
	}
	return regexp.MustCompile(`(?m)^  (--[a-z][a-z0-9-]*|-[a-z])\b`).FindAllString(r.Stdout, -1)
}

// TestCLIHelpIsGNUStyle: every command's --help lists its flags as --flag, its usage
// line names every one of them, and internal flags stay out.
func TestCLIHelpIsGNUStyle(t *testing.T) {
	b := sandboxtest.NewBox(t, "native")
	for _, cmd := range cliCommands {
		r := sandboxtest.Run(b.Agentbox(b.Repo, cmd, "--help"))
		if r.Code != 0 {
			t.Fatalf("%s --help: %s", cmd, r)
		}
		usage, _, _ := strings.Cut(r.Stdout, "\n\n")
		for _, f := range helpFlags(t, b, cmd) {
			f = strings.TrimSpace(f)
			if !strings.Contains(usage, "["+f) {
				t.Errorf("%s: usage line does not list %s:\n%s", cmd, f, usage)
			}
		}
	}
	r := sandboxtest.Run(b.Agentbox(b.Repo, "bench", "--help"))
	for _, internal := range []string{"--serve-api", "--prestart"} {
		if strings.Contains(r.Stdout, internal) {
			t.Errorf("bench --help shows the internal flag %s", internal)
		}
	}
	// exec's help names every flag the README's usage table and the issues name.
	listed := map[string]bool{}
	for _, f := range helpFlags(t, b, "exec") {
		listed[strings.TrimSpace(f)] = true
	}
	for _, f := range []string{"--add-dir", "--allow-git-push", "--allow-net", "--allow-socket", "--backend",
		"--disk-tmp", "--dry-run", "--git-save-dir", "--git-save-keep", "--git-save-keep-size", "--git-save-max-size",
		"--hide", "--hide-secrets", "--json", "--keep", "--keep-agent", "--no-git-save", "--no-record", "--offline",
		"--profile", "--read-only", "--repo"} {
		if !listed[f] {
			t.Errorf("exec --help does not list %s (it lists %v)", f, listed)
		}
	}
}

// TestCLIErrors: unknown and malformed flags are named as typed, exit 125, one line.
func TestCLIErrors(t *testing.T) {
	b := sandboxtest.NewBox(t, "native")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"exec", "--claude"}, "unknown flag: --claude"},
		{[]string{"exec", "-claude"}, "unknown flag: --claude"},
		{[]string{"exec", "--repo"}, "flag needs an argument: --repo"},
		{[]string{"bench", "--runs", "x"}, `invalid value "x" for --runs`},
		{[]string{"bench", "--no-store", "--runs", "1", "--", "no-such-command-x"}, "bench: command no-such-command-x"},
		{[]string{"--frob"}, "unknown flag: --frob"},
		{[]string{"nosuchcommand"}, `unknown command "nosuchcommand"`},
		{[]string{"completion", "tcsh"}, `unknown shell "tcsh"`},
	} {
		r := sandboxtest.Run(b.Agentbox(b.Repo, tc.args...))
		if r.Code != 125 || !strings.Contains(r.Stderr, tc.want) || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 {
			t.Errorf("agentbox %v: want 125 and one line with %q, got %s", tc.args, tc.want, r)
		}
	}
	// No doubled words: bwrap missing from PATH is said once.
	cmd := b.Agentbox(b.Repo, "exec", "--backend", "bwrap", "--no-git-save", "--no-record", "--", "true")
	cmd.Env = append(cmd.Env, "PATH=/usr/bin:/bin")
	if r := sandboxtest.Run(cmd); r.Code != 125 || !strings.Contains(r.Stderr, "bwrap not found on PATH") || strings.Contains(r.Stderr, "bwrap bwrap") {
		t.Errorf("bwrap missing: %s", r)
	}
	// agent-box's "agentbox DIR -- CMD" gets one line saying what to type instead.
	r := sandboxtest.Run(b.Agentbox(b.Home, b.Repo, "--", "true"))
	if r.Code != 125 || !strings.Contains(r.Stderr, "agentbox exec --repo "+b.Repo) {
		t.Errorf("agentbox DIR -- true: %s", r)
	}
}

// TestCLIExecRepoFirst: "agentbox exec DIR -- CMD" runs CMD with DIR as the repository,
// on both backends.
func TestCLIExecRepoFirst(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			r := sandboxtest.Run(b.Agentbox(b.Home, "exec", "--backend", backend, "--no-git-save", "--no-record",
				b.Repo, "--", "/bin/sh", "-c", "touch made-inside && pwd"))
			if r.Code != 0 || strings.TrimSpace(r.Stdout) != b.Repo {
				t.Fatalf("exec DIR -- CMD: %s", r)
			}
			if !sandboxtest.Exists(filepath.Join(b.Repo, "made-inside")) {
				t.Errorf("the write inside DIR did not reach the host")
			}
			r = sandboxtest.Run(b.Agentbox(b.Home, "exec", "--backend", backend, "--repo", b.Repo, b.Repo, "--", "true"))
			if r.Code != 125 || !strings.Contains(r.Stderr, "pass the repository once") {
				t.Errorf("--repo and DIR both: %s", r)
			}
		})
	}
}

// TestCLICompletions: each shell's script is valid for that shell, and bash's offers
// exec's flags and directories for --repo.
func TestCLICompletions(t *testing.T) {
	b := sandboxtest.NewBox(t, "native")
	dir := t.TempDir()
	for _, sh := range []struct{ name, check string }{
		{"bash", "bash -n"},
		{"zsh", "zsh -n"},
		{"fish", "fish --no-execute"},
	} {
		r := sandboxtest.Run(b.Agentbox(b.Repo, "completion", sh.name))
		if r.Code != 0 || r.Stdout == "" {
			t.Fatalf("completion %s: %s", sh.name, r)
		}
		f := filepath.Join(dir, "c."+sh.name)
		if err := os.WriteFile(f, []byte(r.Stdout), 0o644); err != nil {
			t.Fatal(err)
		}
		args := append(strings.Fields(sh.check), f)
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Errorf("%s rejects the %s completion: %v\n%s", sh.check, sh.name, err, out)
		}
		for _, flag := range []string{"--offline", "--repo", "--dry-run"} {
			if !strings.Contains(r.Stdout, strings.TrimPrefix(flag, "--")) {
				t.Errorf("%s completion lacks %s", sh.name, flag)
			}
		}
	}
	// Drive bash's completion function as readline would.
	script := `source "$1"
COMP_WORDS=(agentbox exec --of); COMP_CWORD=2; _agentbox; echo "flags: ${COMPREPLY[*]}"
COMP_WORDS=(agentbox ex); COMP_CWORD=1; _agentbox; echo "cmds: ${COMPREPLY[*]}"
COMP_WORDS=(agentbox exec --repo "$2/"); COMP_CWORD=3; _agentbox; echo "dirs: ${COMPREPLY[*]}"
`
	out, err := exec.Command("bash", "-c", script, "bash", filepath.Join(dir, "c.bash"), b.Home).CombinedOutput()
	if err != nil {
		t.Fatalf("bash completion: %v\n%s", err, out)
	}
	for _, want := range []string{"flags: --offline", "cmds: exec", b.Home + "/repo"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("bash completion: want %q in\n%s", want, out)
		}
	}
}

// TestCLIManPage: the manual is valid roff (groff warns about nothing) and names every
// flag --help names.
func TestCLIManPage(t *testing.T) {
	b := sandboxtest.NewBox(t, "native")
	r := sandboxtest.Run(b.Agentbox(b.Repo, "man"))
	if r.Code != 0 {
		t.Fatalf("man: %s", r)
	}
	page := filepath.Join(t.TempDir(), "agentbox.1")
	if err := os.WriteFile(page, []byte(r.Stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("groff", "-man", "-Tutf8", "-ww", page).CombinedOutput()
	if err != nil {
		t.Fatalf("groff: %v\n%s", err, out)
	}
	text := regexp.MustCompile(".\b").ReplaceAllString(string(out), "")
	text = strings.ReplaceAll(text, "‐\n", "")
	for _, cmd := range cliCommands {
		for _, f := range helpFlags(t, b, cmd) {
			if !strings.Contains(text, strings.TrimSpace(f)) {
				t.Errorf("the man page does not describe %s %s", cmd, f)
			}
		}
	}
}

// TestCLIMessagesSayWhatToDo: refusals and empty answers end with what to type, on
// both backends where a launch is involved.
func TestCLIMessagesSayWhatToDo(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			r := sandboxtest.Run(b.Agentbox(b.Home, "exec", "--backend", backend, "--", "true"))
			if r.Code != 125 || !strings.Contains(r.Stderr, "cd into a project or pass --repo DIR") {
				t.Errorf("exec from HOME: %s", r)
			}
			r = sandboxtest.Run(b.Agentbox(b.Repo, "log"))
			if r.Code != 0 || !strings.Contains(r.Stderr, "--all") {
				t.Errorf("log with nothing recorded: %s", r)
			}
			r = sandboxtest.Run(b.Agentbox(b.Repo, "exec", "--backend", backend, "--dry-run", "--", "no-such-command-x"))
			real := sandboxtest.Run(b.Agentbox(b.Repo, "exec", "--backend", backend, "--no-git-save", "--no-record", "--", "no-such-command-x"))
			if r.Code != 125 || real.Code != 125 || strings.TrimSpace(r.Stderr) != strings.TrimSpace(real.Stderr) {
				t.Errorf("--dry-run with a missing command must fail as the launch does:\ndry run: %s\nlaunch: %s", r, real)
			}
		})
	}
}

// TestCLILogFilters: log -n, --since and --json over real recorded sessions.
func TestCLILogFilters(t *testing.T) {
	b := sandboxtest.NewBox(t, "native")
	for i := 0; i < 3; i++ {
		if r := sandboxtest.Run(b.Agentbox(b.Repo, "exec", "--no-git-save", "--", "true")); r.Code != 0 {
			t.Fatalf("session %d: %s", i, r)
		}
	}
	count := func(args ...string) int {
		t.Helper()
		r := sandboxtest.Run(b.Agentbox(b.Repo, append([]string{"log", "--json"}, args...)...))
		if r.Code != 0 {
			t.Fatalf("log %v: %s", args, r)
		}
		var recs []map[string]any
		if err := json.Unmarshal([]byte(r.Stdout), &recs); err != nil {
			t.Fatalf("log --json: %v\n%s", err, r.Stdout)
		}
		return len(recs)
	}
	if n := count(); n != 3 {
		t.Errorf("log --json: %d records, want 3", n)
	}
	if n := count("-n", "2"); n != 2 {
		t.Errorf("log -n 2: %d records", n)
	}
	if n := count("--since", "1h"); n != 3 {
		t.Errorf("log --since 1h: %d records", n)
	}
	if n := count("--since", "2099-01-01"); n != 0 {
		t.Errorf("log --since 2099-01-01: %d records", n)
	}
	if r := sandboxtest.Run(b.Agentbox(b.Repo, "log", "--since", "yesterday")); r.Code != 125 {
		t.Errorf("log --since yesterday: %s", r)
	}
}

// TestInstallScript: scripts/install.sh, as the README gives it, puts a working
// agentbox, its completions and its manual below PREFIX; the installed binary runs a
// first sandboxed command as the unprivileged user.
func TestInstallScript(t *testing.T) {
	b := sandboxtest.NewBox(t, "native")
	prefix := testenv.Dir(t, "prefix")
	cmd := exec.Command("sh", filepath.Join(testenv.ModuleRoot(), "scripts", "install.sh"))
	cmd.Env = append(os.Environ(), "PREFIX="+prefix)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("install.sh: %v\n%s", err, out)
	}
	for _, f := range []string{"bin/agentbox", "share/bash-completion/completions/agentbox", "share/zsh/site-functions/_agentbox",
		"share/fish/vendor_completions.d/agentbox.fish", "share/man/man1/agentbox.1"} {
		if fi, err := os.Stat(filepath.Join(prefix, f)); err != nil || fi.Size() == 0 {
			t.Errorf("install.sh did not install %s: %v", f, err)
		}
	}
	testenv.Chown(t, prefix)
	run := testenv.Command(t, b.Home, filepath.Join(prefix, "bin/agentbox"), "exec", "--no-git-save", "--no-record", "--", "sh", "-c", "echo inside; touch first")
	run.Dir = b.Repo
	r := sandboxtest.Run(run)
	if r.Code != 0 || !strings.Contains(r.Stdout, "inside") || !sandboxtest.Exists(filepath.Join(b.Repo, "first")) {
		t.Fatalf("the installed agentbox: %s", r)
	}
}

// TestCLIDoctorInsideASandbox: doctor run inside a session explains why the overlay
// check fails there (HOME is already an overlay) instead of asking for a kernel
// this machine already has; on both backends.
func TestCLIDoctorInsideASandbox(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			r := sandboxtest.Run(b.Agentbox(b.Repo, "exec", "--backend", backend, "--no-git-save", "--no-record", "--", b.Bin, "doctor"))
			if !strings.Contains(r.Stdout, "HOME is itself on an overlay") || strings.Contains(r.Stdout, "needs Linux 5.11") {
				t.Errorf("doctor inside a sandbox:\n%s", r)
			}
		})
	}
}

// TestCLIDoctorBwrapAdvice: where no usable bubblewrap is found — none on PATH, or
// Debian 12's own 0.8.0 — doctor says the default backend needs none, and how to build
// 0.12.0 (issue 18), naming what it found; with 0.12.0 it says it is usable.
func TestCLIDoctorBwrapAdvice(t *testing.T) {
	b := sandboxtest.NewBox(t, "native")
	const old = "/var/cache/agentbox-test/bwrap-0.8.0/usr/bin/bwrap"
	if _, err := os.Stat(old); err != nil {
		testenv.Skip(t, "bookworm's bwrap 0.8.0 missing (scripts/setup-test-env.sh unpacks it): %v", err)
	}
	advice := []string{"you do not need it: the default native backend uses no bwrap",
		"Debian 12 ships 0.8.0", "meson setup build", "export AGENTBOX_BWRAP="}
	for _, c := range []struct{ name, env, found string }{
		{"none on PATH", "PATH=/nonexistent", "bwrap not found"},
		{"Debian 12's 0.8.0", "AGENTBOX_BWRAP=" + old, "0.8.0"},
	} {
		cmd := b.Agentbox(b.Repo, "doctor")
		cmd.Env = append(withoutVar(cmd.Env, "AGENTBOX_BWRAP"), c.env)
		r := sandboxtest.Run(cmd)
		for _, want := range append(advice, c.found) {
			if !strings.Contains(r.Stdout, want) {
				t.Errorf("%s: doctor does not say %q:\n%s", c.name, want, r)
			}
		}
	}
	cmd := b.Agentbox(b.Repo, "doctor")
	cmd.Env = append(withoutVar(cmd.Env, "AGENTBOX_BWRAP"), "AGENTBOX_BWRAP="+sandboxtest.BwrapPath(t))
	if r := sandboxtest.Run(cmd); !strings.Contains(r.Stdout, "bwrap 0.12.0 at ") || strings.Contains(r.Stdout, "Debian 12 ships") {
		t.Errorf("with 0.12.0, doctor:\n%s", r)
	}
}

// withoutVar is env without the variable name.
func withoutVar(env []string, name string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}
