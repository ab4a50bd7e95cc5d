package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMovedHomeRefusesTheOperatorsHomeAsRepo: P6 holds for the operator's HOME (the
// program's $HOME) too when Options.Home gives the command another: a repository
// that is or contains it is refused, as agentbox exec refuses --repo ~. It holds
// the operator's shell, SSH and Git set-up, which no audit looks at. On main the
// session ran and wrote ~/.ssh/authorized_keys (with this branch's start-up check
// alone, it was refused only while a start-up file was missing at HOME's top).
func TestMovedHomeRefusesTheOperatorsHomeAsRepo(t *testing.T) {
	if !asTestUser(t) {
		return
	}
	home, _ := filepath.EvalSymlinks(os.Getenv("HOME"))
	if out, err := exec.Command("git", "init", "-q", home).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	agentHome, err := os.MkdirTemp("/var/tmp", "agent-home-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(agentHome) })
	agentHome, _ = filepath.EvalSymlinks(agentHome)
	t.Setenv("XDG_STATE_HOME", filepath.Join(agentHome, "state"))
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(agentHome, "config"))
	res, err := Run(Options{Command: []string{"/bin/sh", "-c", `mkdir -p "$1/.ssh" && echo key >> "$1/.ssh/authorized_keys"`, "sh", home}, Repo: home, Dir: home, Home: agentHome, NoRecord: true, Log: &strings.Builder{}})
	if err == nil {
		t.Fatalf("a session with the operator's HOME as its repository ran (status %d), want refused", res.Status)
	}
	if !strings.Contains(err.Error(), "is "+home+"; rebinding it writable would undo a protection") {
		t.Errorf("refused with %q, want P6's words naming the operator's HOME", err)
	}
}
