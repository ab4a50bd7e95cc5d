package behaviour

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestAuditFixKeepsTheUsersConfig: agentbox audit --fix on a .git/config holding the
// user's remote, branch and editor plus a planted core.fsmonitor takes out the plant
// only: the remote, the branch and the editor stay, the whole file is kept for review,
// and the editor is reported apart as the user's own.
func TestAuditFixKeepsTheUsersConfig(t *testing.T) {
	b := sandboxtest.NewBox(t, "native")
	git := func(args ...string) string { return testenv.Git(t, b.Home, b.Repo, args...) }
	git("remote", "add", "origin", "https://example.invalid/me/repo.git")
	git("config", "branch.main.remote", "origin")
	git("config", "core.editor", "vim")
	run := func(args ...string) sandboxtest.Result {
		return sandboxtest.Run(b.Agentbox(b.Repo, args...))
	}
	// The user's own settings alone: nothing dangerous, the editor listed apart.
	r := run("audit")
	if r.Code != 0 || !strings.Contains(r.Stdout, "yours, kept: ") || !strings.Contains(r.Stdout, "core.editor") {
		t.Fatalf("audit of the user's own config: %s", r)
	}
	marker := filepath.Join(b.Home, "fsmonitor-ran")
	git("config", "core.fsmonitor", "touch "+marker+"; false")
	cfg := filepath.Join(b.Repo, ".git", "config")
	before := sandboxtest.ReadFile(t, cfg)

	r = run("audit", "--fix")
	if r.Code != 1 || !strings.Contains(r.Stdout, "core.fsmonitor") || !strings.Contains(r.Stdout, "entries removed") ||
		!strings.Contains(r.Stdout, "yours, kept: ") {
		t.Fatalf("audit --fix: %s", r)
	}
	for key, want := range map[string]string{"remote.origin.url": "https://example.invalid/me/repo.git", "branch.main.remote": "origin", "core.editor": "vim"} {
		if got := strings.TrimSpace(git("config", "--get", key)); got != want {
			t.Errorf("after --fix, %s = %q, want %q", key, got, want)
		}
	}
	out, _ := testenv.Command(t, b.Home, "git", "-C", b.Repo, "config", "--get", "core.fsmonitor").CombinedOutput()
	if strings.TrimSpace(string(out)) != "" {
		t.Errorf("core.fsmonitor still set: %q", out)
	}
	git("status", "--porcelain")
	if sandboxtest.Exists(marker) {
		t.Errorf("the planted fsmonitor ran on the operator's git status after --fix")
	}
	// The whole file as it was, kept below the state directory.
	var copies []string
	filepath.Walk(filepath.Join(b.Home, ".local/state/agentbox/quarantine"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && strings.HasSuffix(p, "/.git/config") {
			copies = append(copies, p)
		}
		return nil
	})
	if len(copies) != 1 || sandboxtest.ReadFile(t, copies[0]) != before {
		t.Errorf("the whole config is not kept for review: %v", copies)
	}
}

// TestAuditRefusesWhatExecRefuses (issue 35): agentbox audit, with or without --fix,
// refuses the directories exec refuses (P6) and one holding agentbox's own state:
// from / it walked /proc and other users' homes, and from HOME --fix moved a hook
// out of a repository below it and quarantined its own quarantine.
func TestAuditRefusesWhatExecRefuses(t *testing.T) {
	b := sandboxtest.NewBox(t, "native")
	hook := filepath.Join(b.Repo, ".git", "hooks", "pre-commit")
	sandboxtest.WriteFile(t, hook, "#!/bin/sh\nexit 0\n")
	if err := os.Chmod(hook, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.Chown(t, hook)
	for _, c := range []struct {
		dir  string
		args []string
		why  string
	}{
		{"/", []string{"audit"}, "root directory"},
		{"/", []string{"audit", "--fix"}, "root directory"},
		{b.Home, []string{"audit"}, "is " + b.Home},
		{b.Home, []string{"audit", "--fix"}, "is " + b.Home},
		{b.Repo, []string{"audit", "--fix", "--repo", b.Home + "/.local"}, "holds agentbox's own state"},
		{b.Repo, []string{"audit", "--repo", "/proc/self"}, "lies inside /proc"},
	} {
		r := sandboxtest.Run(b.Agentbox(c.dir, c.args...))
		if lines := strings.Split(strings.TrimSpace(r.Stderr), "\n"); r.Code != 125 || len(lines) != 1 || !strings.Contains(r.Stderr, c.why) || r.Stdout != "" {
			t.Errorf("%s: %v: want 125 and one line with %q, got %s", c.dir, c.args, c.why, r)
		}
	}
	if !sandboxtest.Exists(hook) {
		t.Errorf("audit --fix from HOME moved the repository's own hook")
	}
	if sandboxtest.Exists(filepath.Join(b.Home, ".local", "state", "agentbox", "quarantine")) {
		t.Errorf("a refused audit quarantined something")
	}
}

// TestAuditFixTakesOutAPagerRunningATreeFile: agentbox audit --fix is what a user
// runs where no audit ran after a session (a killed launcher whose directory moved
// since). A session's nested repository with core.pager "sh .p" passed as the
// user's own pager — a bare program and plain words — and the audit said nothing
// was found, yet Git runs the pager in the top of the working tree, where sh runs
// the session's .p. In a config below the repository, a pager or an editor with
// arguments, or one inside the repository, is a finding and is taken out.
func TestAuditFixTakesOutAPagerRunningATreeFile(t *testing.T) {
	b := sandboxtest.NewBox(t, "native")
	sub := filepath.Join(b.Repo, "sub")
	marker := filepath.Join(b.Home, "pager-ran")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	sandboxtest.WriteFile(t, filepath.Join(sub, ".p"), "touch "+marker+"; cat\n")
	sandboxtest.WriteFile(t, filepath.Join(sub, "p2"), "#!/bin/sh\ntouch "+marker+"; cat\n")
	if err := os.Chmod(filepath.Join(sub, "p2"), 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.Chown(t, sub)
	testenv.Git(t, b.Home, sub, "init", "-q")
	testenv.Git(t, b.Home, sub, "commit", "-q", "--allow-empty", "-m", "x")
	// The pager runs only on a terminal: script gives Git one.
	gitLog := func() *exec.Cmd {
		cmd := testenv.Command(t, b.Home, "script", "-qec", "git log -1", "/dev/null")
		cmd.Dir = sub
		return cmd
	}
	for _, pager := range []string{"sh .p", filepath.Join(sub, "p2")} {
		testenv.Git(t, b.Home, sub, "config", "core.pager", pager)
		_ = os.Remove(marker)
		if out, err := gitLog().CombinedOutput(); err != nil || !sandboxtest.Exists(marker) {
			t.Fatalf("core.pager %q: the operator's git log does not run the plant (%v): %s", pager, err, out)
		}
		r := sandboxtest.Run(b.Agentbox(b.Repo, "audit", "--fix"))
		if r.Code != 1 || !strings.Contains(r.Stdout, "core.pager") || strings.Contains(r.Stdout, "yours, kept") {
			t.Errorf("core.pager %q: audit --fix: want exit 1 and the pager taken out, got %s", pager, r)
		}
		_ = os.Remove(marker)
		if out, err := gitLog().CombinedOutput(); err != nil || sandboxtest.Exists(marker) {
			t.Errorf("core.pager %q: after audit --fix the operator's git log ran the plant (%v): %s", pager, err, out)
		}
	}
	// The repository's own .git/config, which no session can write, keeps the
	// user's editor and pager with their arguments.
	testenv.Git(t, b.Home, b.Repo, "config", "core.editor", "vim -u NONE")
	testenv.Git(t, b.Home, b.Repo, "config", "core.pager", "less -R")
	if r := sandboxtest.Run(b.Agentbox(b.Repo, "audit")); r.Code != 0 || strings.Count(r.Stdout, "yours, kept") != 2 {
		t.Errorf("the repository's own editor and pager: audit: want exit 0 and both kept as yours, got %s", r)
	}
	// That .git is the common dir of the repository's linked worktrees, whose
	// sessions get its config read-only too (gitguard.ProtectedPaths): audited
	// from a worktree, it keeps them as well.
	testenv.Git(t, b.Home, b.Repo, "commit", "-q", "--allow-empty", "-m", "for a worktree")
	wt := filepath.Join(b.Home, "wt")
	testenv.Git(t, b.Home, b.Repo, "worktree", "add", "-q", wt)
	if r := sandboxtest.Run(b.Agentbox(wt, "audit")); r.Code != 0 || strings.Count(r.Stdout, "yours, kept") != 2 {
		t.Errorf("the common dir's editor and pager, audited from a linked worktree: want exit 0 and both kept as yours, got %s", r)
	}
}
