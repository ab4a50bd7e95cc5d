package audit_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/gitguard/audit"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// This file runs each reproduction of issue 9 inside a real agentbox exec session,
// then runs the operator's Git on the host, as the test user, and checks that the
// payload did not run. Every case first runs the same planting script on the host
// without a sandbox (the control) and checks that the payload does run there, so a
// payload that cannot fire cannot make a case pass.

func TestMain(m *testing.M) {
	if os.Getenv(audit.EnvSinceMutate) != "" {
		audit.RunSinceMutation() // audit_since_test.go
	}
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}

// e2eBackends mirrors test/behaviour: native always, bwrap when bubblewrap 0.12.0 is
// available ($AGENTBOX_BWRAP or scripts/setup-test-env.sh's build; required in CI).
func e2eBackends(t *testing.T) map[string]string {
	list := map[string]string{"native": ""}
	p := os.Getenv("AGENTBOX_BWRAP")
	if p == "" {
		const built = "/var/cache/agentbox-test/bwrap-0.12.0/bin/bwrap"
		if _, err := os.Stat(built); err == nil {
			p = built
		} else if os.Getenv("CI") != "" {
			t.Fatalf("bubblewrap 0.12.0 missing at %s: run scripts/setup-test-env.sh", built)
		}
	}
	if p != "" {
		list["bwrap"] = p
	}
	return list
}

// sh prefixes every script: the payload writes $MARK; a gitdir is made by mkgitdir.
const shPrelude = `set -e
mkgitdir() { mkdir -p "$1/objects" "$1/refs/heads"; echo "ref: refs/heads/main" > "$1/HEAD"; }
fsmon() { printf '[core]\n\tfsmonitor = "touch %s; false"\n' "$MARK"; }
hook() { printf '#!/bin/sh\ntouch %s\n' "$MARK"; }
gitlink() { git update-index --add --cacheinfo "160000,$(git rev-parse HEAD),$1"; printf '[submodule "%s"]\n\tpath = %s\n\turl = ./%s\n' "$1" "$1" "$1" >> .gitmodules; }
`

type auditCase struct {
	name    string
	setup   string   // run on the host before launch (the user's own state)
	plant   string   // run inside the sandbox
	trigger string   // the operator's Git on the host afterwards
	moved   []string // repo-relative paths the audit must quarantine
	refused bool     // the plant cannot write at all (a protected path): no finding expected
	status  int      // exit status of the session
}

var auditCases = []auditCase{
	{name: "redirected common dir", plant: `mkgitdir evil; fsmon > evil/config; echo ../evil > .git/commondir`,
		trigger: "status", moved: []string{".git/commondir", "evil/config"}},
	{name: "planted submodule with its gitdir in the working tree", plant: `mkgitdir sneaky; fsmon > sneaky/config
		mkdir sub; echo "gitdir: ../sneaky" > sub/.git; gitlink sub`,
		trigger: "status", moved: []string{"sneaky/config"}},
	{name: "planted gitdir in .git-modules", plant: `mkgitdir .git/modules/sub; fsmon > .git/modules/sub/config
		mkdir sub; echo "gitdir: ../.git/modules/sub" > sub/.git; gitlink sub`,
		trigger: "status", moved: []string{".git/modules/sub/config"}},
	{name: "nested .git directory as a submodule", plant: `git init -q sub; fsmon > sub/.git/config; gitlink sub`,
		trigger: "status", moved: []string{"sub/.git/config"}},
	{name: "hook in a planted submodule gitdir", plant: `mkgitdir .git/modules/sub; mkdir -p .git/modules/sub/hooks sub
		hook > .git/modules/sub/hooks/pre-commit; chmod +x .git/modules/sub/hooks/pre-commit
		echo "gitdir: ../.git/modules/sub" > sub/.git`,
		trigger: "-C sub commit -q --allow-empty -m x", moved: []string{".git/modules/sub/hooks/pre-commit"}},
	{name: "hook in the user's core.hooksPath", setup: `git config core.hooksPath .githooks; mkdir .githooks`,
		plant:   `hook > .githooks/pre-commit; chmod +x .githooks/pre-commit`,
		trigger: "commit -q --allow-empty -m x", moved: []string{".githooks/pre-commit"}},
	{name: "the user's own hook in core.hooksPath rewritten",
		setup:   `git config core.hooksPath .githooks; mkdir .githooks; printf '#!/bin/sh\nexit 0\n' > .githooks/pre-commit; chmod +x .githooks/pre-commit`,
		plant:   `hook > .githooks/pre-commit`,
		trigger: "commit -q --allow-empty -m x", moved: []string{".githooks/pre-commit"}},
	{name: "the user's own fsmonitor program rewritten",
		setup:   `mkdir tools; printf '#!/bin/sh\nexit 1\n' > tools/fsmon.sh; chmod +x tools/fsmon.sh; git config core.fsmonitor tools/fsmon.sh`,
		plant:   `hook > tools/fsmon.sh`,
		trigger: "status", moved: []string{"tools/fsmon.sh"}},
	{name: "config.worktree of a linked worktree made in the session", setup: `git config extensions.worktreeConfig true`,
		plant:   `git worktree add -q wt; fsmon > .git/worktrees/wt/config.worktree`,
		trigger: "-C wt status", moved: []string{".git/worktrees/wt/config.worktree"}},
	{name: "include target of the repository config", setup: `mkdir conf; echo "[user]" > conf/extra.inc; git config include.path ../conf/extra.inc`,
		plant: `fsmon > conf/extra.inc 2>/dev/null && exit 0; echo refused`, trigger: "status", refused: true},
	{name: "missing include target", setup: `git config include.path ../conf/later.inc`,
		plant: `mkdir -p conf 2>/dev/null; fsmon > conf/later.inc 2>/dev/null && exit 0; echo refused`, trigger: "status", refused: true},
	// .git is a mount point in the sandbox (gitguard.PinnedDirs): the rename that
	// would carry the read-only mounts away with it is refused.
	{name: "the whole .git replaced", plant: `if mv .git .git.old; then mkdir .git
		cp -r .git.old/objects .git.old/refs .git.old/HEAD .git.old/index .git/; fsmon > .git/config; else echo refused; fi`,
		trigger: "status", refused: true},
	{name: "command failed", plant: `mkgitdir evil; fsmon > evil/config; echo ../evil > .git/commondir; exit 3`,
		trigger: "status", moved: []string{".git/commondir", "evil/config"}, status: 3},
	{name: "command killed", plant: `mkgitdir evil; fsmon > evil/config; echo ../evil > .git/commondir; kill -KILL $$`,
		trigger: "status", moved: []string{".git/commondir", "evil/config"}, status: 128 + 9},
}

// e2e is one repository for one run, with the test user's HOME and a marker dir.
type e2e struct {
	t    *testing.T
	home string
	repo string
	mark string
	env  []string
}

// newE2E makes the fixture; bwrap, when set, is the bubblewrap the sessions use.
func newE2E(t *testing.T, bwrap string) *e2e {
	home := testenv.Dir(t, "home")
	markDir := testenv.Dir(t, "mark")
	repo := filepath.Join(home, "repo")
	if err := os.Mkdir(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.Chown(t, repo)
	e := &e2e{t: t, home: home, repo: repo, mark: filepath.Join(markDir, "PWNED")}
	e.env = []string{"MARK=" + e.mark, "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid"}
	if bwrap != "" {
		e.env = append(e.env, "AGENTBOX_BWRAP="+bwrap)
	}
	testenv.Git(t, home, repo, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(repo, "README"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.Chown(t, repo)
	testenv.Git(t, home, repo, "add", "README")
	testenv.Git(t, home, repo, "commit", "-q", "-m", "first")
	return e
}

type outcome struct {
	code           int
	stdout, stderr string
}

func (e *e2e) run(name string, args ...string) outcome {
	e.t.Helper()
	cmd := testenv.Command(e.t, e.home, name, args...)
	cmd.Dir = e.repo
	cmd.Env = append(cmd.Env, e.env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	code := 0
	if errors.As(err, &ee) {
		code = ee.ExitCode() // -1 when agentbox itself died of a signal
	} else if err != nil {
		e.t.Fatalf("run %s: %v", name, err)
	}
	return outcome{code, out.String(), errb.String()}
}

func (e *e2e) sh(script string) outcome {
	e.t.Helper()
	return e.run("/bin/sh", "-c", shPrelude+script)
}

func (e *e2e) operatorGit(trigger string) outcome {
	e.t.Helper()
	return e.run("/bin/sh", "-c", "git "+trigger+" >/dev/null 2>&1; true")
}

// lastRecord returns agentbox show of the newest session recorded for the repo.
func (e *e2e) lastRecord(bin string) string {
	e.t.Helper()
	l := e.run(bin, "log")
	lines := strings.Split(strings.TrimSpace(l.stdout), "\n")
	if l.code != 0 || len(lines) < 2 {
		e.t.Fatalf("agentbox log: %+v", l)
	}
	id, _, _ := strings.Cut(lines[len(lines)-1], " ")
	r := e.run(bin, "show", id)
	if r.code != 0 {
		e.t.Fatalf("agentbox show %s: %+v", id, r)
	}
	return r.stdout
}

// startPlanted starts a session that redirects the common dir to a planted gitdir
// with an fsmonitor payload, and returns once the plant is in place, the session
// still running.
func (e *e2e) startPlanted(bin, backend string, stderr io.Writer) *exec.Cmd {
	e.t.Helper()
	cmd := testenv.Command(e.t, e.home, bin, "exec", "--backend", backend, "--no-git-save", "--", "/bin/sh", "-c",
		shPrelude+`mkgitdir evil; fsmon > evil/config; echo ../evil > .git/commondir; touch planted; exec sleep 60`)
	cmd.Dir = e.repo
	cmd.Env = append(cmd.Env, e.env...)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	// A bound against hangs, not a timing assertion: a loaded machine's launch
	// can take seconds. Signalling a session that has not planted would test
	// nothing, so the bound fails the test.
	planted := filepath.Join(e.repo, "planted")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Lstat(planted); err == nil {
			return cmd
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			e.t.Fatal("the planting session did not plant within a minute")
		}
	}
}

func (e *e2e) fired() bool {
	_, err := os.Lstat(e.mark)
	return err == nil
}

func TestAuditSessionE2E(t *testing.T) {
	bin := testenv.Binary(t)
	for _, c := range auditCases {
		t.Run(c.name, func(t *testing.T) {
			// Control: the same plant on the host, unsandboxed, must fire the payload.
			ctl := newE2E(t, "")
			if c.setup != "" {
				if r := ctl.sh(c.setup); r.code != 0 {
					t.Fatalf("setup: %+v", r)
				}
			}
			ctl.sh(c.plant)
			ctl.operatorGit(c.trigger)
			if !ctl.fired() {
				t.Fatalf("control: the payload did not fire without a sandbox; the case tests nothing")
			}
			for backend, bwrap := range e2eBackends(t) {
				t.Run(backend, func(t *testing.T) {
					e := newE2E(t, bwrap)
					if c.setup != "" {
						if r := e.sh(c.setup); r.code != 0 {
							t.Fatalf("setup: %+v", r)
						}
					}
					r := e.run(bin, "exec", "--backend", backend, "--", "/bin/sh", "-c", shPrelude+c.plant)
					if r.code != c.status {
						t.Fatalf("session exit %d, want %d\nstdout: %s\nstderr: %s", r.code, c.status, r.stdout, r.stderr)
					}
					// The quarantine is checked before the operator's Git runs: finishing a
					// rebase or cherry-pick removes its state directory, copies and all.
					defer func() {
						e.operatorGit(c.trigger)
						if e.fired() {
							t.Errorf("the operator's git %s ran the payload after the session\nstderr: %s", c.trigger, r.stderr)
						}
					}()
					if c.refused {
						if !strings.Contains(r.stdout, "refused") {
							t.Errorf("the sandbox could write a protected include target\nstdout: %s", r.stdout)
						}
						if strings.Contains(r.stderr, "agentbox: audit:") {
							t.Errorf("unexpected finding:\n%s", r.stderr)
						}
						return
					}
					record := e.lastRecord(bin)
					for _, rel := range c.moved {
						p := filepath.Join(e.repo, rel)
						if !strings.Contains(record, p+" ") {
							t.Errorf("the session record does not name %s:\n%s", p, record)
						}
						// Out of the repository, where no running session reaches it.
						q, _ := filepath.Glob(filepath.Join(e.home, ".local/state/agentbox/quarantine/*", p))
						if len(q) != 1 {
							t.Errorf("%s: quarantined copies %v, want one", rel, q)
						}
						if _, err := os.Lstat(p); err == nil {
							t.Errorf("%s is still in place", rel)
						}
						if !strings.Contains(r.stderr, "agentbox: audit: "+p+" ") {
							t.Errorf("stderr does not name %s:\n%s", p, r.stderr)
						}
					}
				})
			}
		})
	}
}

// TestAuditSessionLegitimateE2E checks that ordinary work in a session produces no
// finding: a submodule added from a local path, commits in a nested fixture repository
// that existed before launch with its own pager setting, and the user's own unchanged
// dangerous config and hook.
func TestAuditSessionLegitimateE2E(t *testing.T) {
	bin := testenv.Binary(t)
	for backend, bwrap := range e2eBackends(t) {
		t.Run(backend, func(t *testing.T) {
			e := newE2E(t, bwrap)
			lib := filepath.Join(e.home, "lib")
			setup := `git init -q -b main "$LIB"; git -C "$LIB" commit -q --allow-empty -m lib
				git init -q testdata/fixture; git -C testdata/fixture config core.pager "less -R"
				git config core.editor vi
				printf '#!/bin/sh\nexit 0\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit`
			e.env = append(e.env, "LIB="+lib)
			if r := e.sh(setup); r.code != 0 {
				t.Fatalf("setup: %+v", r)
			}
			r := e.run(bin, "exec", "--backend", backend, "--", "/bin/sh", "-c", `
				git -c protocol.file.allow=always submodule add -q "$LIB" libs/lib 2>/dev/null || true
				test -f libs/lib/.git
				echo x > testdata/fixture/file
				git -C testdata/fixture add file
				git -C testdata/fixture commit -q -m fixture
				echo more >> README; git commit -q -am work`)
			if r.code != 0 {
				t.Fatalf("session: %+v", r)
			}
			if strings.Contains(r.stderr, "agentbox: audit:") {
				t.Errorf("legitimate work produced findings:\n%s", r.stderr)
			}
			// On demand, without a baseline, the user's own settings are reported.
			a := e.run(bin, "audit")
			if a.code != 1 || !strings.Contains(a.stdout, filepath.Join(e.repo, "testdata/fixture/.git/config")) ||
				!strings.Contains(a.stdout, filepath.Join(e.repo, ".git/hooks/pre-commit")) {
				t.Errorf("agentbox audit: %+v", a)
			}
		})
	}
}

// TestAuditCommand checks agentbox audit's exit statuses and --fix.
func TestAuditCommand(t *testing.T) {
	bin := testenv.Binary(t)
	e := newE2E(t, "")
	if r := e.run(bin, "audit"); r.code != 0 || r.stdout != "" {
		t.Errorf("clean repository: %+v", r)
	}
	if r := e.run(bin, "audit", "--repo", filepath.Join(e.repo, "nonexistent")); r.code != 125 || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("bad --repo: %+v", r)
	}
	if r := e.run(bin, "audit", "stray"); r.code != 125 {
		t.Errorf("stray argument: %+v", r)
	}
	if r := e.sh(`mkgitdir evil; fsmon > evil/config; echo ../evil > .git/commondir`); r.code != 0 {
		t.Fatalf("plant: %+v", r)
	}
	r := e.run(bin, "audit", "--repo", e.repo)
	if r.code != 1 || strings.Count(r.stdout, "\n") != 2 || !strings.Contains(r.stdout, "core.fsmonitor") {
		t.Errorf("report: %+v", r)
	}
	if _, err := os.Lstat(filepath.Join(e.repo, ".git/commondir")); err != nil {
		t.Errorf("audit without --fix moved something: %v", err)
	}
	if r := e.run(bin, "audit", "--fix"); r.code != 1 || !strings.Contains(r.stdout, "moved to") {
		t.Errorf("--fix: %+v", r)
	}
	e.operatorGit("status")
	if e.fired() {
		t.Errorf("git status ran the payload after agentbox audit --fix")
	}
	if r := e.run(bin, "audit"); r.code != 0 {
		t.Errorf("after --fix: %+v", r)
	}
}

// TestAuditCommandUnreadable checks, as the unprivileged user, that agentbox audit
// reads into a directory of the user's it cannot list as found (mode 000), reports
// the plant there and puts the mode back.
func TestAuditCommandUnreadable(t *testing.T) {
	bin := testenv.Binary(t)
	e := newE2E(t, "")
	if r := e.sh(`mkdir -p locked/sub; mkgitdir locked/sub/.git; fsmon > locked/sub/.git/config; chmod 000 locked`); r.code != 0 {
		t.Fatalf("setup: %+v", r)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(e.repo, "locked"), 0o755) })
	r := e.run(bin, "audit")
	if r.code != 1 || !strings.Contains(r.stdout, filepath.Join(e.repo, "locked/sub/.git/config")+" (config)") {
		t.Errorf("plant below an unreadable directory: %+v", r)
	}
	if fi, err := os.Lstat(filepath.Join(e.repo, "locked")); err != nil || fi.Mode().Perm() != 0 {
		t.Errorf("locked: %v %v after the audit, want mode 000 back", fi, err)
	}
	// --fix rewrites the config below it, too.
	r = e.run(bin, "audit", "--fix")
	os.Chmod(filepath.Join(e.repo, "locked"), 0o755)
	if data, err := os.ReadFile(filepath.Join(e.repo, "locked/sub/.git/config")); err == nil && strings.Contains(string(data), "fsmonitor") {
		t.Errorf("audit --fix left the plant below an unreadable directory: %+v", r)
	}
}

// TestAuditSessionLinkedWorktreeE2E runs a session in a linked worktree, whose common
// dir outside it is writable in the sandbox, and plants a submodule gitdir there.
func TestAuditSessionLinkedWorktreeE2E(t *testing.T) {
	bin := testenv.Binary(t)
	const plant = `mkgitdir "$COMMON/modules/sub"; fsmon > "$COMMON/modules/sub/config"
		mkdir sub; echo "gitdir: $COMMON/modules/sub" > sub/.git; gitlink sub`
	setup := func(t *testing.T, e *e2e) {
		wt := filepath.Join(e.home, "wt")
		testenv.Git(t, e.home, e.repo, "worktree", "add", "-q", wt)
		e.env = append(e.env, "COMMON="+filepath.Join(e.repo, ".git"))
		e.repo = wt
	}
	ctl := newE2E(t, "")
	setup(t, ctl)
	ctl.sh(plant)
	ctl.operatorGit("status")
	if !ctl.fired() {
		t.Fatalf("control: the payload did not fire without a sandbox; the case tests nothing")
	}
	for backend, bwrap := range e2eBackends(t) {
		t.Run(backend, func(t *testing.T) {
			e := newE2E(t, bwrap)
			setup(t, e)
			r := e.run(bin, "exec", "--backend", backend, "--", "/bin/sh", "-c", shPrelude+plant)
			if r.code != 0 {
				t.Fatalf("session: %+v", r)
			}
			e.operatorGit("status")
			if e.fired() {
				t.Errorf("the operator's git status ran the payload after the session\nstderr: %s", r.stderr)
			}
			cfg := filepath.Join(e.home, "repo/.git/modules/sub/config")
			if !strings.Contains(r.stderr, "agentbox: audit: "+cfg+" ") {
				t.Errorf("stderr does not name %s:\n%s", cfg, r.stderr)
			}
		})
	}
}

// TestAuditSessionSignalledE2E sends SIGTERM to agentbox itself while the command
// runs: the launcher forwards it, the command dies, and the audit still runs.
func TestAuditSessionSignalledE2E(t *testing.T) {
	bin := testenv.Binary(t)
	for backend, bwrap := range e2eBackends(t) {
		t.Run(backend, func(t *testing.T) {
			e := newE2E(t, bwrap)
			var errb bytes.Buffer
			cmd := e.startPlanted(bin, backend, &errb)
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			e.operatorGit("status")
			if e.fired() {
				t.Errorf("the operator's git status ran the payload after a signalled session\nstderr: %s", errb.String())
			}
			for _, rel := range []string{".git/commondir", "evil/config"} {
				p := filepath.Join(e.repo, rel)
				if !strings.Contains(errb.String(), "agentbox: audit: "+p+" ") {
					t.Errorf("stderr does not name %s:\n%s", p, errb.String())
				}
			}
		})
	}
}

// TestAuditAfterKilledLauncherE2E: a launcher killed with SIGKILL runs no audit; the
// next launch of the repository must run it, against the dead session's baseline,
// before it takes its own.
func TestAuditAfterKilledLauncherE2E(t *testing.T) {
	bin := testenv.Binary(t)
	for backend, bwrap := range e2eBackends(t) {
		t.Run(backend, func(t *testing.T) {
			e := newE2E(t, bwrap)
			cmd := e.startPlanted(bin, backend, io.Discard)
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()

			next := e.run(bin, "exec", "--backend", backend, "--no-git-save", "--", "true")
			if next.code != 0 || !strings.Contains(next.stderr, "was killed before its audit") {
				t.Errorf("next launch: status %d, stderr %q; want 0 and the pending audit run", next.code, next.stderr)
			}
			for _, rel := range []string{".git/commondir", "evil/config"} {
				p := filepath.Join(e.repo, rel)
				if !strings.Contains(next.stderr, "agentbox: audit: "+p+" ") {
					t.Errorf("the pending audit does not name %s:\n%s", p, next.stderr)
				}
			}
			e.operatorGit("status")
			if e.fired() {
				t.Errorf("the operator's git status ran the payload after a killed launcher\nstderr of the next launch: %s", next.stderr)
			}
			// Done once: the launch after that has nothing pending.
			if again := e.run(bin, "exec", "--backend", backend, "--no-git-save", "--", "true"); strings.Contains(again.stderr, "killed before its audit") {
				t.Errorf("the pending audit ran twice: %s", again.stderr)
			}
			// Sessions that ended normally leave no journal behind.
			if left, _ := filepath.Glob(filepath.Join(e.home, ".local/state/agentbox/audit-pending/*")); len(left) != 0 {
				t.Errorf("pending-audit journals left: %v", left)
			}
		})
	}
}
