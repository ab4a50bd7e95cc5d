package behaviour

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// The Git rows: the push guard (P9) and linked worktrees, against every backend.

var gitRows = []row{
	{"P9 push guard refuses every way of pushing", pushRefused},
	{"P9 --allow-git-push pushes", pushAllowed},
	{"P9 other Git commands work through the guard", gitWorksGuarded},
	{"P9 guard cached out of the sandbox's reach; staged privately, removed after every exit, where the cache is not", guardStaging},
	{"linked worktree: status, commit, branch work; main stays read-only", linkedWorktree},
	{"--dry-run shows the guard's and the worktree's binds, stages nothing", gitDryRun},
}

func TestGit(t *testing.T) {
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			for _, r := range gitRows {
				t.Run(r.name, func(t *testing.T) {
					r.test(t, newBox(t, backend))
				})
			}
		})
	}
}

// pushProbe defines try NAME CMD...: it runs CMD, then reports on one line
// NAME|exit status|whether /tmp/remote.git got branch main|CMD's output, and resets
// the remote. The remote is a bare repository in the sandbox's own /tmp.
const pushProbe = `
R=/tmp/remote.git
git init -q --bare "$R"
git commit -q --allow-empty -m first
try() {
	name=$1; shift
	if "$@" >/tmp/out 2>&1; then rc=0; else rc=$?; fi
	pushed=no
	if git --git-dir="$R" rev-parse -q --verify refs/heads/main >/dev/null; then
		pushed=yes
		git --git-dir="$R" update-ref -d refs/heads/main
	fi
	printf '%s|%s|%s|%s\n' "$name" "$rc" "$pushed" "$(tr '\n' ' ' </tmp/out)"
}
`

type probeResult struct{ code, pushed, output string }

func parseProbe(t *testing.T, out string) map[string]probeResult {
	t.Helper()
	res := map[string]probeResult{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.SplitN(l, "|", 4)
		if len(f) == 4 {
			res[f[0]] = probeResult{code: f[1], pushed: f[2], output: f[3]}
		}
	}
	return res
}

// pushForms are the ways to push the guard must catch; aliases named r* are set in
// the repository's config on the host (the sandbox cannot write it), g* in the
// global config inside.
var pushForms = []struct{ name, cmd string }{
	{"push", `git push -q "$R" HEAD:main`},
	{"send-pack", `git send-pack "$R" HEAD:refs/heads/main`},
	{"-C dir push", `sh -c 'cd / && git -C "$REPO" push -q "$0" HEAD:main' "$R"`},
	{"global options", `git --no-pager --git-dir="$REPO/.git" --work-tree="$REPO" -c core.quotepath=off --literal-pathspecs push -q "$R" HEAD:main`},
	{"--exec-path= push", `git --exec-path="$(git --exec-path)" push -q "$R" HEAD:main`},
	{"-c alias.p=push p", `git -c alias.p=push p -q "$R" HEAD:main`},
	{"repo alias", `git rp -q "$R" HEAD:main`},
	{"repo alias chain", `git rq "$R" HEAD:main`},
	{"global alias", `git gp -q "$R" HEAD:main`},
	{"! alias", `git rship "$R" HEAD:main`},
	{"exec-path git", `"$(git --exec-path)/git" push -q "$R" HEAD:main`},
	{"git-push helper", `"$(git --exec-path)/git-push" -q "$R" HEAD:main`},
	{"git-send-pack helper", `"$(git --exec-path)/git-send-pack" "$R" HEAD:refs/heads/main`},
	{"canonical git", `"$(readlink -f "$(command -v git)")" push -q "$R" HEAD:main`},
}

func pushScript() string {
	var b strings.Builder
	b.WriteString(pushProbe)
	b.WriteString("git config --global alias.gp push\n")
	for _, f := range pushForms {
		b.WriteString("try '" + f.name + "' " + f.cmd + "\n")
	}
	return b.String()
}

func setRepoAliases(t *testing.T, b *box) {
	testenv.Git(t, b.home, b.repo, "config", "alias.rp", "push")
	testenv.Git(t, b.home, b.repo, "config", "alias.rq", "rp -q")
	testenv.Git(t, b.home, b.repo, "config", "alias.rship", "!git push -q")
}

func pushRefused(t *testing.T, b *box) {
	setRepoAliases(t, b)
	res := parseProbe(t, b.ok(pushScript(), "--no-git-save"))
	for _, f := range pushForms {
		r, ok := res[f.name]
		switch {
		case !ok:
			t.Errorf("%s: not run", f.name)
		case r.pushed != "no" || r.code == "0":
			t.Errorf("%s: not refused: exit %s, pushed %s: %s", f.name, r.code, r.pushed, r.output)
		case !strings.Contains(r.output, "--allow-git-push") || !strings.Contains(r.output, "refused"):
			t.Errorf("%s: refused without naming --allow-git-push: %s", f.name, r.output)
		}
	}
}

func pushAllowed(t *testing.T, b *box) {
	setRepoAliases(t, b)
	res := parseProbe(t, b.ok(pushScript(), "--no-git-save", "--allow-git-push"))
	for _, f := range pushForms {
		if r := res[f.name]; r.pushed != "yes" || r.code != "0" {
			t.Errorf("%s with --allow-git-push: exit %s, pushed %s: %s", f.name, r.code, r.pushed, r.output)
		}
	}
	// Nothing of the guard is in the sandbox then.
	// (The bwrap backend's init lives at /run/agentbox/init, the checkpoint
	// endpoint at /run/agentbox/checkpoint.)
	out := b.ok(`ls -A /run/agentbox 2>/dev/null | grep -v -e '^init$' -e '^checkpoint$'; grep -c agentbox-guard /proc/self/mountinfo || true`, "--no-git-save", "--allow-git-push")
	if out != "0\n" {
		t.Fatalf("guard mounted with --allow-git-push:\n%s", out)
	}
}

func gitWorksGuarded(t *testing.T, b *box) {
	testenv.Git(t, b.home, b.repo, "config", "alias.st", "status --short")
	out := b.ok(`set -e
git init -q /tmp/src && git -C /tmp/src commit -q --allow-empty -m upstream
git add README && git commit -q -m first
git status --short
git st
git switch -q -c base && git branch topic && git switch -q topic
echo more >> README && git commit -qam second
git rebase -q base
git fetch -q /tmp/src HEAD:refs/remotes/src/main
git log --format=%s | tr '\n' ' '; echo
git branch --list base topic --format='%(refname:short)' | tr '\n' ' '; echo
git log -1 --format=%s src/main
git --version | cut -c1-11
`, "--no-git-save")
	if want := "second first \nbase topic \nupstream\ngit version\n"; out != want {
		t.Fatalf("Git through the guard:\n%q\nwant %q", out, want)
	}
	if got := testenv.Git(t, b.home, b.repo, "log", "-1", "--format=%s", "topic"); got != "second" {
		t.Fatalf("commit did not reach the host: %q", got)
	}
}

// guardStaging follows where the guard's bind comes from: the root of the bind in the
// sandbox's mount table. By default it is the user's cache, which the sandbox sees
// only through the HOME overlay: writing the guard there changes neither the guard
// in force nor the host's file. With the cache inside the repository, where the
// sandbox could rewrite it, the guard is staged instead: while the session runs the
// host has the staging dir (mode 0700, the user's); inside, /tmp does not have it;
// after the session, whatever the command's exit, it is gone.
func guardStaging(t *testing.T, b *box) {
	u := testenv.TestUser(t)
	script := `root=$(awk -v p="$(readlink -f "$(command -v git)")" '$5 == p {print $4}' /proc/self/mountinfo)
echo "$root"
printf 'exit 0\n' > "$root" && echo WROTE-OVERLAY
head -c 9 "$(command -v git)"; echo
git push 2>&1 | head -c 28; echo`
	r := run(b.command(b.repo, []string{"--no-git-save"}, script))
	lines := strings.Split(r.stdout, "\n")
	cached := filepath.Join(b.home, ".cache", "agentbox", "pushguard")
	if r.code != 0 || len(lines) < 5 || filepath.Dir(lines[0]) != cached || !strings.HasPrefix(filepath.Base(lines[0]), "git-") {
		t.Fatalf("guard bind does not come from %s: %s", cached, r)
	}
	// The path is HOME's, inside: the write lands in the overlay, not in the guard.
	if !strings.Contains(r.stdout, "WROTE-OVERLAY") ||
		!strings.Contains(r.stdout, "#!/bin/sh\nagentbox: git push refused") {
		t.Fatalf("the guard changed inside the sandbox: %s", r)
	}
	host, err := os.ReadFile(lines[0])
	fi, ferr := os.Lstat(lines[0])
	if err != nil || ferr != nil || !strings.HasPrefix(string(host), "#!/bin/sh") || strings.HasSuffix(string(host), "exit 0\n") || fi.Mode().Perm() != 0o755 {
		t.Fatalf("the host's cached guard after the session: %v %v %q", err, ferr, host)
	}

	inRepo := []string{"XDG_CACHE_HOME=" + filepath.Join(b.repo, ".cache")}
	for _, exit := range []string{"0", "7"} {
		os.Remove(filepath.Join(b.repo, ".go"))
		os.Remove(filepath.Join(b.repo, ".guard-root"))
		script := `root=$(awk -v p="$(readlink -f "$(command -v git)")" '$5 == p {print $4}' /proc/self/mountinfo)
name=$(basename "$(dirname "$root")")
echo "$name" > "$REPO/.guard-root"
if [ -e "/tmp/$name" ] || ls -A /tmp | grep -q .; then echo REACHABLE; fi
while [ ! -e "$REPO/.go" ]; do sleep 0.05; done
exit ` + exit
		res := make(chan result, 1)
		cmd := b.command(b.repo, []string{"--no-git-save"}, script)
		cmd.Env = append(cmd.Env, inRepo...)
		if err := startAndCollect(cmd, res); err != nil {
			t.Fatal(err)
		}
		rootFile := filepath.Join(b.repo, ".guard-root")
		if !waitFor(func() bool { return strings.HasSuffix(readFileOr(rootFile), "\n") }) {
			writeFile(t, filepath.Join(b.repo, ".go"), "")
			t.Fatalf("session never reported its guard: %s", <-res)
		}
		name := strings.TrimSpace(readFileOr(rootFile))
		dir := filepath.Join("/tmp", name)
		if !strings.HasPrefix(name, "agentbox-guard-") {
			writeFile(t, filepath.Join(b.repo, ".go"), "")
			t.Fatalf("guard bind comes from %q, not a staging dir", name)
		}
		fi, err := os.Lstat(dir)
		var st *syscall.Stat_t
		if err == nil {
			st, _ = fi.Sys().(*syscall.Stat_t)
		}
		writeFile(t, filepath.Join(b.repo, ".go"), "")
		r := <-res
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 || st == nil || st.Uid != u.UID {
			t.Fatalf("staging dir %s during the session: %v %v", dir, fi, err)
		}
		if strconv.Itoa(r.code) != exit || strings.Contains(r.stdout, "REACHABLE") {
			t.Fatalf("session: %s", r)
		}
		if exists(dir) || exists(dir+".lock") {
			t.Fatalf("staging dir %s left after exit %s", dir, exit)
		}
	}
	if b.backend != "bwrap" {
		return
	}
	// A launch that fails after staging (bubblewrap too old) removes it too; the
	// launcher's PID is in the staging dir's name.
	old := "/var/cache/agentbox-test/bwrap-0.8.0/usr/bin/bwrap"
	if !exists(old) {
		t.Fatal("bubblewrap 0.8.0 not unpacked: run scripts/setup-test-env.sh")
	}
	cmd := b.command(b.repo, []string{"--no-git-save"}, "true")
	cmd.Env = append(cmd.Env, append(inRepo, "AGENTBOX_BWRAP="+old)...)
	res := make(chan result, 1)
	if err := startAndCollect(cmd, res); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	r = <-res
	if r.code != 125 || !strings.Contains(r.stderr, "0.8.0") {
		t.Fatalf("launch with bubblewrap 0.8.0: %s", r)
	}
	if left, _ := filepath.Glob(fmt.Sprintf("/tmp/agentbox-guard-%d-*", pid)); len(left) != 0 {
		t.Fatalf("staging left after a failed launch: %v", left)
	}
}

// linkedWorktree: the repository is a linked worktree of a main repository outside
// HOME. Git works in it and its commits reach the main repository; the main
// worktree's files, HEAD, index, hooks and config, and the worktree's own pointers,
// stay read-only; what the writable common dir still allows is the audit's.
func linkedWorktree(t *testing.T, b *box) {
	mainRepo := testenv.Dir(t, "main")
	testenv.Git(t, b.home, mainRepo, "init", "-q")
	writeFile(t, filepath.Join(mainRepo, "README"), "main\n")
	testenv.Chown(t, mainRepo)
	testenv.Git(t, b.home, mainRepo, "add", "README")
	testenv.Git(t, b.home, mainRepo, "commit", "-q", "-m", "first")
	wt := filepath.Join(b.home, "wt")
	testenv.Git(t, b.home, mainRepo, "worktree", "add", "-q", "-b", "topic", wt)
	common := filepath.Join(mainRepo, ".git")
	watched := []string{
		filepath.Join(mainRepo, "README"), filepath.Join(common, "HEAD"), filepath.Join(common, "index"),
		filepath.Join(common, "config"), filepath.Join(common, "worktrees/wt/commondir"),
		filepath.Join(common, "worktrees/wt/gitdir"),
	}
	before := map[string]string{}
	for _, p := range watched {
		before[p] = readFile(t, p)
	}

	r := run(b.command(wt, []string{"--no-git-save"}, `M=`+mainRepo+`
git status --short && echo STATUS-OK
echo change > file && git add file && git commit -q -m in-worktree && echo COMMIT-OK
git branch side && echo BRANCH-OK
git pack-refs --all && git branch -q -D side 2>/dev/null && echo DELETE-OK
git switch -q -c other && git switch -q topic && echo SWITCH-OK
for p in "$M/README" "$M/.git/HEAD" "$M/.git/index" "$M/.git/config" "$M/.git/hooks/pre-commit" \
	"$M/.git/worktrees/wt/commondir" "$M/.git/worktrees/wt/gitdir"; do
	if (echo evil >> "$p") 2>/dev/null; then echo "WROTE $p"; fi
done
`))
	if r.code != 0 {
		t.Fatalf("session in a linked worktree: %s", r)
	}
	for _, ok := range []string{"STATUS-OK", "COMMIT-OK", "BRANCH-OK", "DELETE-OK", "SWITCH-OK"} {
		if !strings.Contains(r.stdout, ok) {
			t.Errorf("missing %s in a linked worktree:\n%s", ok, r)
		}
	}
	if strings.Contains(r.stdout, "WROTE") {
		t.Errorf("wrote to the main repository:\n%s", r.stdout)
	}
	if strings.Contains(r.stderr, "agentbox: audit:") || strings.Contains(r.stderr, "stays read-only") {
		t.Errorf("legitimate worktree work reported:\n%s", r.stderr)
	}
	for _, p := range watched {
		if got := readFile(t, p); got != before[p] {
			t.Errorf("%s changed on the host", p)
		}
	}
	if exists(filepath.Join(common, "hooks/pre-commit")) {
		t.Errorf("hook created on the host")
	}
	if got := testenv.Git(t, b.home, mainRepo, "log", "-1", "--format=%s", "topic"); got != "in-worktree" {
		t.Fatalf("the worktree's commit is not in the main repository: %q", got)
	}
	if got := testenv.Git(t, b.home, mainRepo, "branch", "--list", "side", "other"); got != "other" {
		t.Fatalf("branches in the main repository: %q, want only other", got)
	}

	// The common dir is writable (Git must create packed-refs.lock there), so a new
	// file can appear in it; one that redirects the operator's Git (a commondir) is
	// the post-session audit's to move aside.
	r = run(b.command(wt, []string{"--no-git-save"}, `M=`+mainRepo+`; echo "$M/evil" > "$M/.git/commondir"`))
	if r.code != 0 {
		t.Fatalf("plant: %s", r)
	}
	if exists(filepath.Join(common, "commondir")) || !strings.Contains(r.stderr, "agentbox: audit: "+filepath.Join(common, "commondir")) {
		t.Fatalf("planted commondir in the common dir not quarantined:\n%s", r)
	}
	if got := testenv.Git(t, b.home, mainRepo, "log", "-1", "--format=%s"); got != "first" {
		t.Fatalf("main repository after the audit: %q", got)
	}
}

func gitDryRun(t *testing.T, b *box) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	if git, err = filepath.EvalSymlinks(git); err != nil {
		t.Fatal(err)
	}
	mainRepo := testenv.Dir(t, "main")
	testenv.Git(t, b.home, mainRepo, "init", "-q")
	testenv.Git(t, b.home, mainRepo, "commit", "-q", "--allow-empty", "-m", "first")
	wt := filepath.Join(b.home, "wt")
	testenv.Git(t, b.home, mainRepo, "worktree", "add", "-q", wt)
	common := filepath.Join(mainRepo, ".git")

	cmd := b.command(wt, []string{"--dry-run"}, "true")
	res := make(chan result, 1)
	if err := startAndCollect(cmd, res); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	r := <-res
	if r.code != 0 {
		t.Fatalf("--dry-run: %s", r)
	}
	guard := filepath.Join(b.home, ".cache", "agentbox", "pushguard", "git-")
	for _, want := range []string{guard, git, "/run/agentbox/pushguard", common} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("--dry-run does not show %s:\n%s", want, r.stdout)
		}
	}
	if left, _ := filepath.Glob(fmt.Sprintf("/tmp/agentbox-guard-%d-*", pid)); len(left) != 0 {
		t.Errorf("--dry-run staged %v", left)
	}
	r = run(b.command(wt, []string{"--dry-run", "--allow-git-push"}, "true"))
	if r.code != 0 || strings.Contains(r.stdout, "agentbox-guard") || strings.Contains(r.stdout, "/run/agentbox/pushguard") {
		t.Errorf("--dry-run --allow-git-push still shows the guard:\n%s", r)
	}
}
