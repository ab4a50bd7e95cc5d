package pushguard

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// The guard script runs here on the host, in front of the host's real Git, against a
// local bare remote: each refused form is also run with the real Git alone (the
// control), which must push, so a refusal is the guard's and not a broken command.

type guardFixture struct {
	t       *testing.T
	bin     string // holds git (the guard) and its dashed helper links
	repo    string
	remote  string
	env     []string
	realGit string
}

func hostGit(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("git")
	if err != nil {
		testenv.Skip(t, "no git on PATH")
	}
	p, err = filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newGuardFixture(t *testing.T) *guardFixture {
	t.Helper()
	real := hostGit(t)
	dir := testenv.CanonTempDir(t)
	f := &guardFixture{t: t, bin: filepath.Join(dir, "bin"), repo: filepath.Join(dir, "repo"),
		remote: filepath.Join(dir, "remote.git"), realGit: real}
	if err := os.MkdirAll(f.bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.bin, "git"), []byte(GuardScript(real)), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"git-push", "git-send-pack", "git-http-push", "git-upload-pack"} {
		if err := os.Symlink("git", filepath.Join(f.bin, h)); err != nil {
			t.Fatal(err)
		}
	}
	global := filepath.Join(dir, "gitconfig")
	if err := os.WriteFile(global, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f.env = append(os.Environ(), "HOME="+dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+global,
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid", "GIT_PAGER=cat", "PAGER=cat")
	f.real(dir, "init", "-q", "--bare", f.remote)
	f.real(dir, "init", "-q", "-b", "main", f.repo)
	if err := os.WriteFile(filepath.Join(f.repo, "README"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.real(f.repo, "add", "README")
	f.real(f.repo, "commit", "-q", "-m", "first")
	f.real(f.repo, "remote", "add", "origin", f.remote)
	return f
}

// real runs the real Git and fails the test on error.
func (f *guardFixture) real(dir string, args ...string) string {
	f.t.Helper()
	cmd := exec.Command(f.realGit, args...)
	cmd.Dir, cmd.Env = dir, f.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		f.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// run runs name (git or a dashed helper) with PATH finding the guard first, or with
// the real Git's PATH only when guarded is false.
func (f *guardFixture) run(guarded bool, dir, name string, args ...string) (string, string, int) {
	f.t.Helper()
	path := "/usr/local/bin:/usr/bin:/bin"
	if guarded {
		path = f.bin + ":" + path
	} else if name != "git" {
		name = filepath.Join(f.execPath(), name)
	}
	if guarded {
		name = filepath.Join(f.bin, name)
	}
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(append([]string(nil), f.env...), "PATH="+path)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		f.t.Fatalf("%s: %v", name, err)
	}
	return out.String(), errb.String(), code
}

func (f *guardFixture) execPath() string {
	return strings.TrimSpace(f.real(f.repo, "--exec-path"))
}

// remoteHas reports whether the remote has branch main.
func (f *guardFixture) remoteHas() bool {
	cmd := exec.Command(f.realGit, "--git-dir", f.remote, "rev-parse", "-q", "--verify", "refs/heads/main")
	cmd.Env = f.env
	return cmd.Run() == nil
}

func TestGuardRefusesPushes(t *testing.T) {
	cases := []struct {
		name   string
		config [][]string // real `git config` calls in the repo before the run
		dir    string     // "" is the repo; "parent" runs from its parent
		cmd    string     // git or a dashed helper
		args   []string
		noCtl  bool // no control run (needs a transport the test has not)
	}{
		{name: "push", cmd: "git", args: []string{"push", "-q", "origin", "main"}},
		{name: "send-pack", cmd: "git", args: []string{"send-pack", "REMOTE", "main"}},
		{name: "-C dir push", dir: "parent", cmd: "git", args: []string{"-C", "repo", "push", "-q", "origin", "main"}},
		{name: "--git-dir= --work-tree= push", dir: "parent", cmd: "git", args: []string{"--git-dir=repo/.git", "--work-tree=repo", "push", "-q", "origin", "main"}},
		{name: "--git-dir DIR push", dir: "parent", cmd: "git", args: []string{"--git-dir", "repo/.git", "push", "-q", "origin", "main"}},
		{name: "--no-pager -c k=v -p push", cmd: "git", args: []string{"--no-pager", "-c", "user.name=x", "--literal-pathspecs", "push", "-q", "origin", "main"}},
		{name: "--exec-path= push", cmd: "git", args: []string{"--exec-path=EXEC", "push", "-q", "origin", "main"}},
		{name: "-c alias.p=push p", cmd: "git", args: []string{"-c", "alias.p=push", "p", "-q", "origin", "main"}},
		{name: "alias in repo config", config: [][]string{{"alias.p", "push"}}, cmd: "git", args: []string{"p", "-q", "origin", "main"}},
		{name: "alias chain", config: [][]string{{"alias.p", "push -q"}, {"alias.q", "p"}, {"alias.r", "q origin"}}, cmd: "git", args: []string{"r", "main"}},
		{name: "alias with options", config: [][]string{{"alias.p", "-p push"}}, cmd: "git", args: []string{"p", "-q", "origin", "main"}},
		{name: "alias upper case", config: [][]string{{"alias.pp", "push"}}, cmd: "git", args: []string{"PP", "-q", "origin", "main"}},
		{name: "global alias, -C", config: [][]string{{"--global", "alias.up", "push"}}, dir: "parent", cmd: "git", args: []string{"-C", "repo", "up", "-q", "origin", "main"}},
		{name: "! alias", config: [][]string{{"alias.ship", "!git push -q origin"}}, cmd: "git", args: []string{"ship", "main"}},
		{name: "! alias function", config: [][]string{{"alias.ship", "!f() { echo shipping; git -C . push -q origin \"$@\"; }; f"}}, cmd: "git", args: []string{"ship", "main"}},
		{name: "! alias dashed helper", config: [][]string{{"alias.ship", "!$(git --exec-path)/git-send-pack REMOTE"}}, cmd: "git", args: []string{"ship", "main"}},
		{name: "dashed git-push", cmd: "git-push", args: []string{"-q", "origin", "main"}},
		{name: "dashed git-send-pack", cmd: "git-send-pack", args: []string{"REMOTE", "main"}},
		{name: "http-push", cmd: "git", args: []string{"http-push", "https://example.invalid/r.git", "main"}, noCtl: true},
		{name: "dashed git-http-push", cmd: "git-http-push", args: []string{"https://example.invalid/r.git", "main"}, noCtl: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newGuardFixture(t)
			exec := f.execPath()
			args := make([]string, len(c.args))
			for i, a := range c.args {
				a = strings.ReplaceAll(a, "REMOTE", f.remote)
				args[i] = strings.ReplaceAll(a, "EXEC", exec)
			}
			for _, kv := range c.config {
				kv = append([]string(nil), kv...)
				kv[len(kv)-1] = strings.ReplaceAll(kv[len(kv)-1], "REMOTE", f.remote)
				f.real(f.repo, append([]string{"config"}, kv...)...)
			}
			dir := f.repo
			if c.dir == "parent" {
				dir = filepath.Dir(f.repo)
			}
			_, stderr, code := f.run(true, dir, c.cmd, args...)
			if code == 0 || !strings.Contains(stderr, "--allow-git-push") || f.remoteHas() {
				t.Fatalf("not refused: exit %d, remote updated %v, stderr:\n%s", code, f.remoteHas(), stderr)
			}
			if lines := strings.Count(strings.TrimSpace(stderr), "\n"); lines != 0 {
				t.Errorf("refusal is not one line:\n%s", stderr)
			}
			if c.noCtl {
				return
			}
			out, stderr, code := f.run(false, dir, c.cmd, args...)
			if code != 0 || !f.remoteHas() {
				t.Fatalf("control with the real Git did not push: exit %d\n%s%s", code, out, stderr)
			}
		})
	}
}

func TestGuardRunsEverythingElse(t *testing.T) {
	f := newGuardFixture(t)
	git := func(args ...string) string {
		t.Helper()
		out, stderr, code := f.run(true, f.repo, "git", args...)
		if code != 0 {
			t.Fatalf("guarded git %s: exit %d\n%s%s", strings.Join(args, " "), code, out, stderr)
		}
		return out
	}
	// The remote gets main through the real Git, so that fetch has something.
	f.real(f.repo, "push", "-q", "origin", "main")
	if err := os.WriteFile(filepath.Join(f.repo, "new"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := git("status", "--porcelain"); out != "?? new\n" {
		t.Fatalf("status: %q", out)
	}
	git("add", "new")
	git("-c", "user.name=other", "commit", "-q", "-m", "second")
	git("branch", "topic")
	git("switch", "-q", "topic")
	git("commit", "-q", "--allow-empty", "-m", "on topic")
	git("rebase", "-q", "main")
	git("fetch", "-q", "origin")
	git("-C", f.repo, "--no-pager", "log", "--oneline", "-1")
	if out := git("rev-parse", "--abbrev-ref", "HEAD"); out != "topic\n" {
		t.Fatalf("HEAD: %q", out)
	}
	if out := git("--version"); !strings.HasPrefix(out, "git version") {
		t.Fatalf("--version: %q", out)
	}
	if out := git("--exec-path"); strings.TrimSpace(out) != f.execPath() {
		t.Fatalf("--exec-path: %q", out)
	}

	// Aliases that do not push, ! aliases that only mention push, and aliases named
	// like a command (Git runs the command, so the guard must too).
	f.real(f.repo, "config", "alias.st", "status --short")
	f.real(f.repo, "config", "alias.last", "!git log -1 --format=%s")
	f.real(f.repo, "config", "alias.say", "!echo push")
	f.real(f.repo, "config", "alias.whatchanged", "push") // a builtin: the alias is dead
	f.real(f.repo, "config", "alias.hello", "push")       // git-hello below wins over it
	if out := git("st"); out != "" {
		t.Fatalf("st: %q", out)
	}
	if out := git("last"); out != "on topic\n" {
		t.Fatalf("last: %q", out)
	}
	if out := git("say"); out != "push\n" {
		t.Fatalf("say: %q", out)
	}
	git("whatchanged", "-1")
	if err := os.WriteFile(filepath.Join(f.bin, "git-hello"), []byte("#!/bin/sh\necho hello from git-hello\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out := git("hello"); out != "hello from git-hello\n" {
		t.Fatalf("hello: %q", out)
	}
	// A dashed helper that does not push runs as git NAME.
	out, stderr, code := f.run(true, f.repo, "git-upload-pack", "-h")
	if code == 0 || strings.Contains(stderr, "--allow-git-push") || !strings.Contains(out+stderr, "upload-pack") {
		t.Fatalf("git-upload-pack -h through the guard: exit %d\n%s%s", code, out, stderr)
	}
	if f.remoteHas() && f.real(f.repo, "rev-parse", "main") == f.real(f.repo, "--git-dir", f.remote, "rev-parse", "main") {
		t.Fatal("the remote moved: something pushed")
	}
}

// TestGuardScriptIsPOSIX runs the refusal under every POSIX shell the host has, so
// that a bashism cannot hide behind /bin/sh being bash.
func TestGuardScriptIsPOSIX(t *testing.T) {
	shells := 0
	for _, sh := range []string{"/bin/dash", "/bin/bash", "/bin/busybox"} {
		if _, err := os.Stat(sh); err != nil {
			continue
		}
		shells++
		f := newGuardFixture(t)
		f.real(f.repo, "config", "alias.p", "push")
		f.real(f.repo, "config", "alias.ship", "!git push origin")
		for _, args := range [][]string{{"p", "origin", "main"}, {"ship", "main"}, {"-C", ".", "push"}} {
			argv := append([]string{filepath.Join(f.bin, "git")}, args...)
			if sh == "/bin/busybox" {
				argv = append([]string{"sh"}, argv...)
			} else if sh == "/bin/bash" {
				argv = append([]string{"--posix"}, argv...)
			}
			cmd := exec.Command(sh, argv...)
			cmd.Dir, cmd.Env = f.repo, f.env
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), "--allow-git-push") || f.remoteHas() {
				t.Errorf("%s git %v: not refused: %v\n%s", sh, args, err, out)
			}
		}
		cmd := exec.Command(sh, append([]string{filepath.Join(f.bin, "git")}, "status", "--short")...)
		if sh == "/bin/busybox" {
			cmd = exec.Command(sh, "sh", filepath.Join(f.bin, "git"), "status", "--short")
		}
		cmd.Dir, cmd.Env = f.repo, f.env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s git status: %v\n%s", sh, err, out)
		}
	}
	if shells == 0 {
		testenv.Skip(t, "no dash, bash or busybox")
	}
}

func TestFindHostGit(t *testing.T) {
	real := hostGit(t)
	h, found, err := FindHostGit(func(string) string { return "" })
	if err != nil || !found {
		t.Fatalf("FindHostGit: %v %v", found, err)
	}
	if h.Git != real || h.Shadow[0] != real {
		t.Fatalf("Git %s, Shadow %v; want %s first", h.Git, h.Shadow, real)
	}
	out, err := exec.Command(real, "--exec-path").Output()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := filepath.EvalSymlinks(strings.TrimSpace(string(out)))
	if h.ExecPath != want {
		t.Fatalf("ExecPath %q, git --exec-path says %q", h.ExecPath, want)
	}
	// Every helper that pushes resolves to a shadowed file.
	for _, name := range []string{"git", "git-push", "git-send-pack"} {
		p, err := filepath.EvalSymlinks(filepath.Join(want, name))
		if err != nil {
			continue
		}
		if !contains(h.Shadow, p) {
			t.Errorf("%s resolves to %s, which is not shadowed: %v", name, p, h.Shadow)
		}
	}
	seen := map[string]bool{}
	for _, p := range h.Shadow {
		if seen[p] || !filepath.IsAbs(p) || !isFile(p) {
			t.Errorf("bad shadow entry %q in %v", p, h.Shadow)
		}
		seen[p] = true
	}

	// GIT_EXEC_PATH wins, as it does for Git.
	alt := testenv.CanonTempDir(t)
	if err := os.Symlink(real, filepath.Join(alt, "git-push")); err != nil {
		t.Fatal(err)
	}
	h, _, err = FindHostGit(func(k string) string {
		if k == "GIT_EXEC_PATH" {
			return alt
		}
		return ""
	})
	if err != nil || h.ExecPath != alt || len(h.Shadow) != 1 {
		t.Fatalf("GIT_EXEC_PATH=%s: %+v %v (git-push links to git itself: one shadow)", alt, h, err)
	}

	// Found through a relative PATH entry ("."): still the canonical file.
	dot := testenv.CanonTempDir(t)
	if err := os.Symlink(real, filepath.Join(dot, "git")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dot)
	t.Setenv("PATH", ".")
	if h, found, err := FindHostGit(os.Getenv); !found || err != nil || h.Git != real {
		t.Fatalf("PATH=.: %+v %v %v", h, found, err)
	}

	// No git on PATH: nothing to guard.
	t.Setenv("PATH", testenv.CanonTempDir(t))
	if _, found, err := FindHostGit(os.Getenv); found || err != nil {
		t.Fatalf("no git: found %v err %v", found, err)
	}
}

func TestStageGuard(t *testing.T) {
	h := HostGit{Git: "/usr/bin/git2"}
	s, err := StageGuard(h)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Remove()
	if filepath.Dir(s.Dir) != "/tmp" || !strings.HasPrefix(filepath.Base(s.Dir), GuardStagePrefix+strconv.Itoa(os.Getpid())+"-") {
		t.Fatalf("staging dir %s: want /tmp/%s%d-XXXX", s.Dir, GuardStagePrefix, os.Getpid())
	}
	fi, err := os.Lstat(s.Dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("staging dir: %v %v", fi.Mode(), err)
	}
	fi, err = os.Lstat(s.Guard)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o755 {
		t.Fatalf("guard: %v %v", fi.Mode(), err)
	}
	b, err := os.ReadFile(s.Guard)
	if err != nil || string(b) != GuardScript(h.Real()) || !strings.Contains(string(b), "'/run/agentbox/pushguard/git2'") {
		t.Fatalf("guard content differs from GuardScript (%v)", err)
	}
	// $TMPDIR does not move it.
	t.Setenv("TMPDIR", testenv.CanonTempDir(t))
	s2, err := StageGuard(h)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(s2.Dir) != "/tmp" {
		t.Errorf("TMPDIR moved the staging dir to %s", s2.Dir)
	}
	if err := s2.Remove(); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{s.Dir, s2.Dir} {
		if _, err := os.Lstat(d); !os.IsNotExist(err) {
			t.Errorf("%s not removed: %v", d, err)
		}
	}
	var nilGuard *StagedGuard
	if err := nilGuard.Remove(); err != nil {
		t.Fatal(err)
	}
}

// The cached guard is written once and read back after; a copy that was changed,
// widened or replaced is written again, and a cache the sandbox could write is
// refused before anything is written there.
func TestCacheGuard(t *testing.T) {
	h := HostGit{Git: "/usr/bin/git2"}
	dir := filepath.Join(testenv.CanonTempDir(t), "cache", "pushguard")
	all := func(string) bool { return true }
	path, err := CacheGuard(h, dir, all)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(path) != dir || filepath.Base(path) != GuardCacheName(h) {
		t.Fatalf("cached at %s, want %s/%s", path, dir, GuardCacheName(h))
	}
	if fi, err := os.Lstat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("cache dir: %v %v", fi.Mode(), err)
	}
	check := func(what string) {
		t.Helper()
		fi, err := os.Lstat(path)
		b, rerr := os.ReadFile(path)
		if err != nil || rerr != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o755 || string(b) != GuardScript(h.Real()) {
			t.Fatalf("%s: guard %v %v %v, content ok %v", what, fi.Mode(), err, rerr, string(b) == GuardScript(h.Real()))
		}
	}
	check("first")
	var before, after unix.Stat_t
	_ = unix.Stat(path, &before)
	if _, err := CacheGuard(h, dir, all); err != nil {
		t.Fatal(err)
	}
	_ = unix.Stat(path, &after)
	if before.Ino != after.Ino {
		t.Error("an intact cached guard was written again")
	}
	for what, spoil := range map[string]func(){
		"changed":  func() { os.WriteFile(path, []byte("#!/bin/sh\nexec /run/agentbox/pushguard/git \"$@\"\n"), 0o755) },
		"grown":    func() { f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0); f.WriteString("\n"); f.Close() },
		"widened":  func() { os.Chmod(path, 0o777) },
		"symlink":  func() { os.Remove(path); os.Symlink("/bin/true", path) },
		"replaced": func() { os.Remove(path); os.Mkdir(path, 0o755) },
	} {
		spoil()
		if what == "replaced" {
			// A directory in its place cannot be renamed over: an error, not a guard.
			if _, err := CacheGuard(h, dir, all); err == nil {
				t.Errorf("%s: accepted", what)
			}
			os.Remove(path)
			continue
		}
		if _, err := CacheGuard(h, dir, all); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		check(what)
	}
	// Refused: a dir the sandbox can write, and one others can write.
	other := filepath.Join(testenv.CanonTempDir(t), "pg")
	if _, err := CacheGuard(h, other, func(string) bool { return false }); err == nil {
		t.Error("a cache the sandbox can write was used")
	}
	if ents, _ := os.ReadDir(other); len(ents) != 0 {
		t.Errorf("wrote %v into a refused cache", ents)
	}
	if err := os.Chmod(other, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := CacheGuard(h, other, all); err == nil {
		t.Error("a cache others can write was used")
	}
	// One the init could not reach: below another user's mode-0700 directory (root
	// launching into someone else's HOME: root's capabilities do not count there).
	home := filepath.Join(testenv.CanonTempDir(t), "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, os.Geteuid()+4242, os.Getegid()+4242); err != nil {
		testenv.Skip(t, "chown needs root: %v", err)
	}
	if _, err := CacheGuard(h, filepath.Join(home, ".cache", "pushguard"), all); err == nil {
		t.Error("a cache below another user's private directory was used")
	}
}

// TestCacheGuardConcurrent: sessions launched at the same moment into a fresh cache
// all write the guard; the file any of them found (and would bind) stays the one at
// the path, never unlinked by another's write. (The bind's source captured by one
// launch was replaced by the next one's rename, and move_mount, or bwrap's
// /proc/self/fd/N, failed with ENOENT: TestConcurrentSessions, seen in CI.)
func TestCacheGuardConcurrent(t *testing.T) {
	h := HostGit{Git: "/usr/bin/git2"}
	all := func(string) bool { return true }
	for round := 0; round < 50; round++ {
		dir := filepath.Join(testenv.CanonTempDir(t), "pushguard")
		var wg sync.WaitGroup
		files := make([]*os.File, 8)
		for i := range files {
			wg.Add(1)
			go func() {
				defer wg.Done()
				path, err := CacheGuard(h, dir, all)
				if err != nil {
					t.Error(err)
					return
				}
				files[i], _ = os.Open(path)
			}()
		}
		wg.Wait()
		for i, f := range files {
			if f == nil {
				t.Fatalf("round %d: launch %d found no guard", round, i)
			}
			var st unix.Stat_t
			if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Nlink == 0 {
				t.Fatalf("round %d: the guard launch %d found was unlinked by another's write (nlink %d, %v)", round, i, st.Nlink, err)
			}
			f.Close()
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 1 {
			t.Fatalf("round %d: cache holds %d entries, want the guard alone", round, len(ents))
		}
	}
}
