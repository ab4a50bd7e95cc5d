package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMovedHomeSharesTheOperatorsPendingAudits: a Go API session whose Options.Home
// gives the command a HOME of its own keeps its pending-audit journal, audit locks
// and record where every other launch of the operator's looks (XDG_STATE_HOME, else
// the process's $HOME), not below the HOME it overlays. On main its state directory
// moved with Options.Home: a session started beside another one on the same
// repository saw no pending journal, took the other's plant for the user's own in
// its baseline, and its audit let it pass (and a killed launcher's session was left
// for launches that never look there).
func TestMovedHomeSharesTheOperatorsPendingAudits(t *testing.T) {
	if !asTestUser(t) {
		return
	}
	repo := newRepo(t)
	agentHome, err := os.MkdirTemp(os.Getenv("HOME"), "agent-home-")
	if err != nil {
		t.Fatal(err)
	}
	end := plantingSession(t, repo, "the first session", Options{Repo: repo, Dir: repo, NoRecord: true, Log: &strings.Builder{}})
	res, err := Run(Options{Command: []string{"true"}, Repo: repo, Dir: repo, Home: agentHome, NoRecord: true, Log: &strings.Builder{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := end(); err != nil {
		t.Fatal(err)
	}
	if !foundPlant(res.AuditFindings) {
		t.Errorf("the session with its own HOME found %q, want the nested repository's config the first session planted before it started", res.AuditFindings)
	}
	if _, err := os.Lstat(filepath.Join(agentHome, ".local", "state", "agentbox")); err == nil {
		t.Error("the session kept agentbox's state below the HOME it overlays")
	}
}

// TestMovedHomeKeepsTheOperatorsStartupFiles: a Go API session whose Options.Home
// gives the command a HOME of its own still finds the start-up files of the
// operator's HOME (the program's $HOME) that lie in the repository — a dotfiles
// checkout with ~/.bashrc linked into it — and keeps them read-only, as agentbox
// exec does. On main only those of Options.Home were looked for: the session wrote
// what the operator's next shell ran.
func TestMovedHomeKeepsTheOperatorsStartupFiles(t *testing.T) {
	if !asTestUser(t) {
		return
	}
	home, _ := filepath.EvalSymlinks(os.Getenv("HOME"))
	repo, err := os.MkdirTemp(home, "dotfiles-")
	if err != nil {
		t.Fatal(err)
	}
	rc := filepath.Join(repo, "bashrc")
	if err := os.WriteFile(rc, []byte("# mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(rc, filepath.Join(home, ".bashrc")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(filepath.Join(home, ".bashrc")) })
	for _, agentHome := range []string{"moved", "/"} {
		if agentHome == "moved" {
			if agentHome, err = os.MkdirTemp(home, "agent-home-"); err != nil {
				t.Fatal(err)
			}
		}
		res, err := Run(Options{Command: []string{"/bin/sh", "-c", `echo 'touch /tmp/pwned' >> "$1"`, "sh", rc}, Repo: repo, Dir: repo, Home: agentHome, NoRecord: true, Log: &strings.Builder{}})
		b, _ := os.ReadFile(rc)
		if err == nil && (res.Status == 0 || string(b) != "# mine\n") {
			t.Errorf("Home %s: the session wrote ~/.bashrc's target in the repository (status %d): %q", agentHome, res.Status, b)
		}
	}
}

// TestMovedHomeKeepsTheOperatorsConfigOutOfReach: the config agentbox exec reads
// (${XDG_CONFIG_HOME:-$HOME/.config}/agentbox of the program's environment) stays
// out of a Go API session's writable directories when Options.Home gives the
// command another HOME: a repository that holds it is refused, as by agentbox exec.
// On main the check looked below Options.Home only, and the session could write the
// config that widens the operator's next agentbox exec.
func TestMovedHomeKeepsTheOperatorsConfigOutOfReach(t *testing.T) {
	if !asTestUser(t) {
		return
	}
	home, _ := filepath.EvalSymlinks(os.Getenv("HOME"))
	repo := filepath.Join(home, ".config", "agentbox")
	if err := os.MkdirAll(repo, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("git", "init", "-q", repo).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	agentHome, err := os.MkdirTemp(home, "agent-home-")
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(repo, "config.toml")
	res, err := Run(Options{Command: []string{"/bin/sh", "-c", `echo 'allow-git-push = true' > "$1"`, "sh", config}, Repo: repo, Dir: repo, Home: agentHome, NoRecord: true, Log: &strings.Builder{}})
	if err == nil {
		b, _ := os.ReadFile(config)
		t.Fatalf("a session of the repository holding the operator's config ran (status %d; config now %q), want refused", res.Status, b)
	}
	if !strings.Contains(err.Error(), "config") {
		t.Errorf("refused with %q, want the words naming agentbox's config", err)
	}
}
